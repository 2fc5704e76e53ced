import CachetBenchKit
import CachetTestSupport
import Foundation
import Testing

@Suite("cachet-bench configuration, keys, sampling and reports")
struct BenchConfigurationTests {
    @Test func zipfFavoursLowRanksAndStaysInRange() {
        let chooser = KeyChooser(count: 1000, distribution: .zipf)
        var random = BenchRandom(seed: 7)
        var counts = [Int](repeating: 0, count: 1000)
        for _ in 0..<100_000 { counts[chooser.next(&random)] += 1 }
        // With s = 0.99 over 1,000 keys, rank 1 has probability 1 / H(1000, 0.99), about 13.4%,
        // and rank 2 about half that.
        #expect((12_400...14_400).contains(counts[0]), "rank 1 drew \(counts[0])")
        #expect((5_900...7_500).contains(counts[1]), "rank 2 drew \(counts[1])")
        #expect(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500])
        #expect(counts.reduce(0, +) == 100_000)
    }

    @Test func uniformCoversEveryKeyEvenly() {
        let chooser = KeyChooser(count: 10, distribution: .uniform)
        var random = BenchRandom(seed: 3)
        var counts = [Int](repeating: 0, count: 10)
        for _ in 0..<100_000 { counts[chooser.next(&random)] += 1 }
        for count in counts { #expect((9_500...10_500).contains(count)) }
    }

    @Test func theSameSeedDrawsTheSameKeys() {
        let chooser = KeyChooser(count: 100_000, distribution: .zipf)
        var first = BenchRandom(seed: 11)
        var second = BenchRandom(seed: 11)
        for _ in 0..<1000 { #expect(chooser.next(&first) == chooser.next(&second)) }
    }

    @Test func keysArePaddedToTheirSizeAndAllHaveOneLength() {
        var configuration = BenchConfiguration()
        configuration.keys = 100_000
        configuration.keySize = 14
        #expect(configuration.key(42) == Array("key:0000000042".utf8))
        #expect(configuration.key(99_999) == Array("key:0000099999".utf8))
        #expect(configuration.keyLength == 14)
        // Too narrow for the largest index: every key is widened alike.
        configuration.keySize = 3
        #expect(configuration.key(42) == Array("key:00042".utf8))
        #expect(configuration.key(0).count == configuration.keyLength)
        configuration.keys = 1
        #expect(configuration.key(0) == Array("key:0".utf8))
    }

    @Test(arguments: [
        ("connections", "--connections"), ("pipeline", "--pipeline"), ("keys", "--keys"), ("getRatio", "--get-ratio"),
        ("threads", "--threads"), ("duration", "--duration"), ("requests", "--requests"),
        ("valueSize", "--value-size"), ("keySize", "--key-size"), ("warmup", "--warmup"), ("port", "port"),
        ("noStop", "--duration or --requests"), ("rate", "--rate"), ("rateNaN", "--rate"),
        ("keysPerGet", "--keys-per-get"), ("keysPerGetNative", "--protocol memcache"),
    ])
    func invalidConfigurationsNameTheFlag(field: String, flag: String) {
        var configuration = BenchConfiguration()
        switch field {
        case "connections": configuration.connections = 0
        case "pipeline": configuration.pipeline = 5000
        case "keys": configuration.keys = 0
        case "getRatio": configuration.getRatio = 1.5
        case "threads": (configuration.threads, configuration.connections) = (8, 4)
        case "duration": configuration.duration = -1
        case "requests": configuration.requests = -5
        case "valueSize": configuration.valueSize = -1
        case "keySize": configuration.keySize = 300
        case "warmup": configuration.warmup = .nan
        case "port": configuration.targets = [BenchTarget(host: "127.0.0.1", port: 70_000)]
        case "rate": configuration.rate = 0
        case "rateNaN": configuration.rate = .nan
        case "keysPerGet": (configuration.protocolKind, configuration.keysPerGet) = (.memcache, 101)
        case "keysPerGetNative": configuration.keysPerGet = 10
        default: (configuration.duration, configuration.requests) = (nil, nil)
        }
        #expect(throws: BenchError.self) { try configuration.validate() }
        do {
            try configuration.validate()
        } catch {
            #expect(error.message.contains(flag), "\(error.message)")
            #expect(error.code == .invalidConfiguration)
        }
    }

    @Test func theDefaultsAreValid() throws {
        try BenchConfiguration().validate()
    }

    @Test func everyThreadNeedsAConnectionToEveryServer() {
        var configuration = BenchConfiguration()
        configuration.targets = (1...3).map { BenchTarget(host: "127.0.0.1", port: 7000 + $0) }
        configuration.threads = 2
        configuration.connections = 5
        #expect(throws: BenchError.self) { try configuration.validate() }
        configuration.connections = 6
        #expect(throws: Never.self) { try configuration.validate() }
    }

    @Test func aServerNamedTwiceIsRejected() {
        // Keys are routed on the ring of the servers' host:port names, which names every server once.
        var configuration = BenchConfiguration()
        configuration.targets = [7001, 7002, 7001].map { BenchTarget(host: "127.0.0.1", port: $0) }
        do {
            try configuration.validate()
            Issue.record("accepted a server named twice")
        } catch {
            #expect(error.message == "server 127.0.0.1:7001 is named twice: list every server once")
        }
        // The same port on another host name is another server.
        configuration.targets[2].host = "localhost"
        #expect(throws: Never.self) { try configuration.validate() }
    }

    @Test func clusterFilesAreTheNodesJSONFile() throws {
        let directory = TemporaryDirectory()
        let path = directory.path + "/cluster.json"
        let text = """
            {"virtual_nodes_per_member": 64, "members": [
              {"id": "b", "host": "127.0.0.1", "port": 7002},
              {"host": "localhost", "port": 7003},
              {"id": "a", "host": "::1", "port": 7001}]}
            """
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let (targets, virtualNodes) = try BenchTarget.targets(inClusterFile: path)
        #expect(virtualNodes == 64)
        // In the ring's member order (ids by their bytes), each with its address and id.
        #expect(targets.map(\BenchTarget.id) == ["a", "b", "localhost:7003"])
        #expect(targets.map(\BenchTarget.description) == ["::1:7001", "127.0.0.1:7002", "localhost:7003"])
        var configuration = BenchConfiguration()
        configuration.targets = targets
        configuration.connections = 3
        #expect(throws: Never.self) { try configuration.validate() }

        try "127.0.0.1:7001\n127.0.0.1:7002\n".write(toFile: path, atomically: true, encoding: .utf8)
        do throws(BenchError) {
            _ = try BenchTarget.targets(inClusterFile: path)
            Issue.record("accepted a file of host:port lines")
        } catch {
            #expect(error.code == .invalidConfiguration && error.message.contains("line 1"), "\(error.message)")
        }
        #expect(throws: BenchError.self) { try BenchTarget.targets(inClusterFile: directory.path + "/missing") }
    }

    @Test func twoServersWithOneIDAreRefused() {
        var configuration = BenchConfiguration()
        configuration.targets = [
            BenchTarget(host: "127.0.0.1", port: 7001, id: "n1"), BenchTarget(host: "127.0.0.1", port: 7002, id: "n1"),
        ]
        configuration.connections = 2
        #expect(throws: BenchError.self) { try configuration.validate() }
    }

    @Test func theProgressLineShowsRateLatencyAndHits() {
        let progress = BenchProgress(
            elapsed: 3.02,
            opsPerSecond: 152_340.4,
            p99Microseconds: 410,
            hitRatio: 0.998,
            errors: 0
        )
        #expect(progress.line == "[3s] 152340 ops/s  p99 0.41 ms  hits 99.8%  errors 0")
        let prefill = BenchProgress(
            elapsed: 1,
            opsPerSecond: 10,
            p99Microseconds: nil,
            hitRatio: 0,
            errors: 2,
            prefilling: true
        )
        #expect(prefill.line == "[1s prefill] 10 ops/s  errors 2")
    }

    @Test func theJSONReportHasTheDocumentedShape() throws {
        let text = """
            {"client_cpu_seconds":1.5,"config":{"connections":50,"distribution":"uniform","duration_seconds":2,\
            "get_ratio":0.9,"key_size":14,"keys":100,"keys_per_get":1,"pipeline":1,"prefill":true,"seed":42,"threads":1,\
            "value_size":100,"warmup_seconds":0},"duration_seconds":2,"errors":0,\
            "get_latency_us":{"max":7,"mean":2,"p50":1,"p99":4,"p999":7},"hit_ratio":1,"hits":9,\
            "latency_us":{"max":9,"mean":2,"p50":1,"p99":5,"p999":8},"misses":0,"ops_per_sec":5,\
            "prefill":{"errors":0,"ops_per_sec":100,"requests":100,"seconds":1},"protocol":"cachet",\
            "put_latency_us":{"max":9,"mean":6,"p50":5,"p99":9,"p999":9},"requests":10,\
            "targets":["127.0.0.1:7420"],"verification_errors":0}
            """
        let report = try JSONDecoder().decode(BenchReport.self, from: Data(text.utf8))
        #expect(report.json == text)
        #expect(report.latencyUs.p999 == 8 && report.config.keySize == 14 && report.prefill?.requests == 100)
        #expect(report.getLatencyUs?.p99 == 4 && report.putLatencyUs?.p50 == 5)
        #expect(!report.hasErrors)
        var failing = report
        failing.prefill?.errors = 1
        #expect(failing.hasErrors)
    }
}
