import CachetBenchKit
import CachetIO
import CachetRing
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A port nothing listens on right now (bound to 0 and released).
func freePort() -> Int {
    guard let (fd, port) = try? CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0)) else { return 0 }
    CachetSocket.close(fd)
    return port
}

struct ServerStartError: Error, CustomStringConvertible {
    var description: String
}

/// A memcached or redis-server child on 127.0.0.1, killed (SIGKILL: it may inherit an ignored SIGTERM)
/// when released.
final class ServerProcess {
    let process = Process()
    let port = freePort()

    init(_ path: String, arguments: (Int) -> [String]) throws {
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments(port)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Wait until it accepts connections.
        for _ in 0..<100 {
            if let fd = try? CachetSocket.connect(
                to: CachetAddress(host: "127.0.0.1", port: port),
                timeout: .milliseconds(500)
            ) {
                CachetSocket.close(fd)
                return
            }
            usleep(50_000)
        }
        throw ServerStartError(description: "\(path) did not listen on port \(port)")
    }

    deinit {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}

/// Runs the built `cachet-bench` and returns its exit status, standard output and standard error.
func runBench(_ arguments: [String]) throws -> (status: Int32, output: String, errors: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-bench"))
    process.arguments = arguments
    let directory = TemporaryDirectory(prefix: "cachet-bench-test")
    let errorPath = directory.appending("stderr")
    _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle(forWritingAtPath: errorPath)
    try process.run()
    let outputData = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (
        process.terminationStatus,
        String(decoding: outputData, as: UTF8.self),
        (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
    )
}

let memcachedPath = "/usr/bin/memcached"
let redisPath = "/usr/bin/redis-server"

/// A prefilled run of `requests` requests over `keys` keys against the servers on 127.0.0.1 at `ports`.
func prefilledRun(ports: [Int], connections: Int, keys: Int, requests: Int) -> BenchConfiguration {
    var configuration = BenchConfiguration()
    configuration.targets = ports.map { BenchTarget(host: "127.0.0.1", port: $0) }
    configuration.connections = connections
    configuration.keys = keys
    configuration.prefill = true
    configuration.duration = nil
    configuration.requests = requests
    return configuration
}

@Suite("cachet-bench end to end", .serialized, .dedicatedThreads)
struct BenchEndToEndTests {
    @Test func loadsARealNodeAndVerifiesEveryReply() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        var configuration = prefilledRun(ports: [node.port], connections: 4, keys: 500, requests: 5_000)
        configuration.pipeline = 8
        let report = try CachetBench.run(configuration)
        #expect(report.prefill?.requests == 500 && report.prefill?.errors == 0)
        #expect(report.requests == 5_000)
        #expect(report.hitRatio == 1 && report.hits > 4_000)
        #expect(report.verificationErrors == 0 && report.errors == 0)
        #expect(report.latencyUs.p50 > 0 && report.latencyUs.p99 >= report.latencyUs.p50)
        #expect(report.latencyUs.p999 >= report.latencyUs.p99 && report.latencyUs.max >= report.latencyUs.p999)
        // Reads and writes are also measured apart; together they make up the overall histogram.
        let gets = try #require(report.getLatencyUs)
        let puts = try #require(report.putLatencyUs)
        #expect(gets.p50 > 0 && puts.p50 > 0)
        #expect(max(gets.max, puts.max) == report.latencyUs.max)
        #expect(min(gets.p50, puts.p50) <= report.latencyUs.p50 && report.latencyUs.p50 <= max(gets.p50, puts.p50))
    }

    @Test func aPacedRunKeepsToItsSchedule() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        var configuration = prefilledRun(ports: [node.port], connections: 4, keys: 100, requests: 1_200)
        configuration.rate = 4_000
        let report = try CachetBench.run(configuration)
        #expect(report.requests == 1_200 && report.verificationErrors == 0)
        #expect(report.config.rate == 4_000)
        // Never ahead of the schedule: 1,200 requests at 4,000/s take 0.3 s less one interval at least,
        // however fast the node answers.
        #expect(report.durationSeconds >= 0.299, "\(report.durationSeconds) s")
        #expect(report.opsPerSecond <= 4_000 * 1.01)
    }

    @Test func aReadOnlyRunHasNoWriteLatency() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        var configuration = prefilledRun(ports: [node.port], connections: 2, keys: 100, requests: 1_000)
        configuration.getRatio = 1
        let report = try CachetBench.run(configuration)
        #expect(report.hits == 1_000 && report.verificationErrors == 0)
        #expect(report.getLatencyUs == report.latencyUs)
        #expect(report.putLatencyUs == nil)
    }

    @Test func keysOfAClusterGoToTheirOwnNode() throws {
        // Every key must be read from the node it was written to: a GET sent elsewhere would miss, which
        // after --prefill is a verification error.
        let nodes = try (0..<2).map { _ in try NodeProcess(arguments: ["--disk-limit", "0"]) }
        var configuration = prefilledRun(ports: nodes.map(\.port), connections: 4, keys: 1_000, requests: 4_000)
        configuration.threads = 2
        configuration.pipeline = 4
        let report = try CachetBench.run(configuration)
        #expect(report.prefill?.requests == 1_000)
        #expect(report.requests == 4_000 && report.verificationErrors == 0 && report.hitRatio == 1)
    }

    @Test func clusterKeysAreWrittenToTheirOwnerOnTheRing() throws {
        // cachet-bench routes as Protocol/RING.md says: after a fill over three nodes, every key is on its
        // owner among the servers' host:port names, and on no other node.
        let nodes = try (0..<3).map { _ in try NodeProcess(arguments: ["--disk-limit", "0"]) }
        let configuration = prefilledRun(ports: nodes.map(\.port), connections: 3, keys: 300, requests: 0)
        let report = try CachetBench.run(configuration)
        #expect(report.prefill?.requests == 300 && report.prefill?.errors == 0)

        let ring = try CachetRing(members: configuration.targets.map(\.description))
        let clients = try nodes.map { try $0.connect() }
        var owned = [String: Int]()
        for index in 0..<configuration.keys {
            let key = configuration.key(index)
            let owner = ring.members[ring.owner(of: key)]
            owned[owner, default: 0] += 1
            for (target, client) in zip(configuration.targets, clients) {
                let status = try client.roundTrip(.get(key: key), id: UInt32(index)).status
                let expected: CachetStatus = target.description == owner ? .ok : .notFound
                #expect(status == expected, "key \(index) on \(target), whose owner is \(owner)")
            }
        }
        #expect(owned.count == 3, "every node owns some of the 300 keys: \(owned)")
    }

    @Test func aServerThatOwnsNoKeyGetsNoRequest() throws {
        // One key for two nodes: one of them owns nothing, and its connections stay idle.
        let nodes = try (0..<2).map { _ in try NodeProcess(arguments: ["--disk-limit", "0"]) }
        var configuration = prefilledRun(ports: nodes.map(\.port), connections: 2, keys: 1, requests: 200)
        configuration.duration = 5
        let report = try CachetBench.run(configuration)
        #expect(report.prefill?.requests == 1)
        #expect(report.requests == 200 && report.verificationErrors == 0 && report.hitRatio == 1)
        #expect(report.durationSeconds < 4)
    }

    @Test func evictedKeysAreVerificationErrorsAndExitOne() throws {
        // 2,000 values of 4 KiB do not fit a 1 MiB memory tier: reads after the prefill miss.
        let node = try NodeProcess(arguments: ["--disk-limit", "0", "--memory-limit", "1MiB"])
        let result = try runBench([
            "--port", "\(node.port)", "--requests", "2000", "--connections", "2", "--keys", "2000",
            "--value-size", "4096", "--get-ratio", "1", "--prefill", "--json", "--quiet",
        ])
        #expect(result.status == 1, "\(result.errors)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
        #expect((object["verification_errors"] as? Int ?? 0) > 0)
        #expect(result.errors.contains("verification errors"))
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: memcachedPath), "memcached is not installed"))
    func loadsMemcached() throws {
        let server = try ServerProcess(memcachedPath) {
            ["-u", "nobody", "-l", "127.0.0.1", "-p", "\($0)", "-m", "64", "-U", "0"]
        }
        var configuration = prefilledRun(ports: [server.port], connections: 2, keys: 200, requests: 2_000)
        configuration.protocolKind = .memcache
        configuration.pipeline = 4
        let report = try CachetBench.run(configuration)
        #expect(report.requests == 2_000 && report.verificationErrors == 0 && report.errors == 0)
        #expect(report.hitRatio == 1)
    }

    /// Gets of ten keys each on a node's memcached port: every key of every get found, with its length.
    @Test func getsOfSeveralKeysOnTheMemcachedPort() throws {
        let port = freePort()
        let node = try NodeProcess(arguments: ["--disk-limit", "0", "--memcached-port", "\(port)"])
        var configuration = prefilledRun(ports: [port], connections: 2, keys: 300, requests: 1_000)
        configuration.protocolKind = .memcache
        configuration.keysPerGet = 10
        configuration.getRatio = 1
        configuration.pipeline = 4
        let report = try CachetBench.run(configuration)
        #expect(report.requests == 1_000 && report.verificationErrors == 0 && report.errors == 0)
        #expect(report.hits == 10_000 && report.hitRatio == 1)
        #expect(report.config.keysPerGet == 10)
        _ = node
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: redisPath), "redis-server is not installed"))
    func loadsRedis() throws {
        let server = try ServerProcess(redisPath) {
            [
                "--port", "\($0)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode",
                "no",
            ]
        }
        var configuration = prefilledRun(ports: [server.port], connections: 2, keys: 200, requests: 2_000)
        configuration.protocolKind = .resp
        configuration.pipeline = 4
        configuration.valueSize = 20_000
        let report = try CachetBench.run(configuration)
        #expect(report.requests == 2_000 && report.verificationErrors == 0 && report.errors == 0)
        #expect(report.hitRatio == 1)
    }

    @Test func theExecutableReportsJSON() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let result = try runBench([
            "--port", "\(node.port)", "--requests", "1000", "--connections", "2", "--keys", "100", "--prefill",
            "--json", "--quiet",
        ])
        #expect(result.status == 0, "\(result.errors)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
        #expect(object["requests"] as? Int == 1000)
        #expect(object["verification_errors"] as? Int == 0)
        #expect(object["protocol"] as? String == "cachet")
        #expect((object["ops_per_sec"] as? Double ?? 0) > 0)
        let latency = try #require(object["latency_us"] as? [String: Any])
        #expect(Set(latency.keys) == ["p50", "p99", "p999", "max", "mean"])
        let config = try #require(object["config"] as? [String: Any])
        #expect(config["connections"] as? Int == 2 && config["keys"] as? Int == 100)
    }

    @Test func fillWritesEveryKeyAndExits() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let result = try runBench(["--port", "\(node.port)", "--fill", "3000", "--json", "--quiet"])
        #expect(result.status == 0, "\(result.errors)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
        let prefill = try #require(object["prefill"] as? [String: Any])
        #expect(prefill["requests"] as? Int == 3000 && prefill["errors"] as? Int == 0)
        #expect(object["requests"] as? Int == 0)
        // Every key is there: a measured run after it hits every time.
        let check = try runBench([
            "--port", "\(node.port)", "--keys", "3000", "--requests", "3000", "--get-ratio", "1", "--json", "--quiet",
        ])
        #expect(check.output.contains("\"hit_ratio\":1,"), "\(check.output)")
    }

    @Test func aRefusedConnectionIsExitTwo() throws {
        let result = try runBench(["--port", "\(freePort())", "--requests", "10", "--quiet"])
        #expect(result.status == 2)
        #expect(result.errors.contains("cannot connect to 127.0.0.1:"), "\(result.errors)")
    }

    @Test(arguments: [
        ["--get-ratio", "2"], ["--protocol", "http"], ["--pipeline", "0"], ["--no-such-flag"],
        ["--fill", "10", "--requests", "5"], ["--distribution", "pareto"],
    ])
    func usageErrorsAreExitTwo(arguments: [String]) throws {
        let result = try runBench(arguments + ["--quiet"])
        #expect(result.status == 2, "\(arguments): \(result.errors)")
        #expect(!result.errors.isEmpty)
    }

    @Test func theProgressLineAppearsOnStandardError() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let result = try runBench([
            "--port", "\(node.port)", "--duration", "1.5", "--connections", "2", "--keys", "100", "--prefill",
        ])
        #expect(result.status == 0, "\(result.errors)")
        #expect(result.errors.contains("[1s] "), "\(result.errors)")
        #expect(result.errors.contains(" ops/s  p99 "), "\(result.errors)")
        #expect(result.output.contains("ops/s over"))
    }
}
