import CachetBenchKit
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Parses `stream` fed in pieces of `chunk` bytes, as replies arrive from a socket.
func parseAll<D: BenchProtocolDriver>(_ driver: D, _ stream: [UInt8], chunk: Int) throws -> [BenchReply] {
    var replies: [BenchReply] = []
    var received: [UInt8] = []
    var offset = 0
    var position = 0
    while position < stream.count {
        let next = min(stream.count, position + chunk)
        received += stream[position..<next]
        position = next
        while let (reply, end) = try received.withUnsafeBytes({ try driver.parseReply($0, at: offset) }) {
            replies.append(reply)
            offset = end
        }
    }
    #expect(offset == stream.count, "bytes left over")
    return replies
}

@Suite("cachet-bench drivers")
struct BenchDriverTests {
    @Test func memcacheRequestsAreExact() {
        var output: [UInt8] = []
        MemcacheDriver().appendSet(key: Array("key:1".utf8), value: Array("hello".utf8), to: &output)
        MemcacheDriver().appendGet(key: Array("key:1".utf8), to: &output)
        #expect(String(decoding: output, as: UTF8.self) == "set key:1 0 0 5\r\nhello\r\nget key:1\r\n")
    }

    @Test func respRequestsAreExact() {
        var output: [UInt8] = []
        RESPDriver().appendSet(key: Array("k".utf8), value: Array("hello".utf8), to: &output)
        RESPDriver().appendGet(key: Array("k".utf8), to: &output)
        #expect(
            String(decoding: output, as: UTF8.self)
                == "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        )
    }

    @Test func cachetRequestsMatchTheCodec() {
        var output: [UInt8] = []
        CachetDriver().appendSet(key: [1, 2], value: [3], to: &output)
        CachetDriver().appendGet(key: [1, 2], to: &output)
        #expect(
            output == CachetCommand.put(key: [1, 2], value: [3], ttl: 0).encoded(id: 0)
                + CachetCommand.get(key: [1, 2]).encoded(id: 0)
        )
    }

    @Test(arguments: [1, 2, 3, 7, 1000])
    func memcacheRepliesParseAcrossReads(chunk: Int) throws {
        let stream = Array("STORED\r\nVALUE key:1 0 5\r\nhello\r\nEND\r\nEND\r\nSERVER_ERROR out of memory\r\n".utf8)
        #expect(try parseAll(MemcacheDriver(), stream, chunk: chunk) == [.stored, .hit(length: 5), .miss, .error])
    }

    @Test(arguments: [1, 2, 5, 1000])
    func respRepliesParseAcrossReads(chunk: Int) throws {
        let stream = Array("+OK\r\n$5\r\nhello\r\n$-1\r\n-ERR wrong\r\n$0\r\n\r\n".utf8)
        #expect(
            try parseAll(RESPDriver(), stream, chunk: chunk) == [
                .stored, .hit(length: 5), .miss, .error, .hit(length: 0),
            ]
        )
    }

    @Test(arguments: [1, 3, 12, 1000])
    func cachetRepliesParseAcrossReads(chunk: Int) throws {
        let stream =
            CachetResponse(opcode: .put, status: .ok, id: 0).encoded
            + CachetResponse(opcode: .get, status: .ok, id: 0, body: [1, 2, 3]).encoded
            + CachetResponse(opcode: .get, status: .notFound, id: 0).encoded
            + CachetResponse(opcode: .get, status: .tooLarge, id: 0, body: Array("no".utf8)).encoded
        #expect(try parseAll(CachetDriver(), stream, chunk: chunk) == [.stored, .hit(length: 3), .miss, .error])
    }

    @Test func garbageIsAnError() {
        #expect(throws: BenchError.self) { try parseAll(RESPDriver(), Array("?what\r\n".utf8), chunk: 100) }
    }

    @Test func zipfFavoursLowRanksAndStaysInRange() {
        let chooser = KeyChooser(count: 1000, distribution: .zipf)
        var random = BenchRandom(seed: 7)
        var counts = [Int](repeating: 0, count: 1000)
        for _ in 0..<100_000 { counts[chooser.next(&random)] += 1 }
        // With s = 0.99 over 1,000 keys, rank 1 draws about 13% of requests and rank 2 half as many.
        #expect((11_000...15_500).contains(counts[0]), "rank 1 drew \(counts[0])")
        #expect(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500])
        let uniform = KeyChooser(count: 10, distribution: .uniform)
        for _ in 0..<1000 { #expect((0..<10).contains(uniform.next(&random))) }
    }

    @Test func keysArePaddedToTheirSize() {
        var configuration = BenchConfiguration()
        configuration.keySize = 14
        #expect(configuration.key(42) == Array("key:0000000042".utf8))
        configuration.keySize = 3
        #expect(configuration.key(42) == Array("key:42".utf8))
    }

    @Test func invalidConfigurationsNameTheFlag() {
        var configuration = BenchConfiguration()
        configuration.getRatio = 1.5
        #expect(throws: BenchError.self) { try configuration.validate() }
        configuration = BenchConfiguration()
        configuration.threads = 100
        configuration.connections = 2
        do {
            try configuration.validate()
            Issue.record("accepted")
        } catch {
            #expect(error.message.contains("--threads"))
        }
    }
}

@Suite("cachet-bench end to end")
struct BenchEndToEndTests {
    @Test func loadsARealNodeAndVerifiesEveryReply() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        var configuration = BenchConfiguration()
        configuration.targets = [("127.0.0.1", node.port)]
        configuration.connections = 4
        configuration.pipeline = 8
        configuration.keys = 500
        configuration.prefill = true
        configuration.duration = nil
        configuration.requests = 5_000
        let report = try CachetBench.run(configuration)
        #expect(report.requests == 5_000)
        #expect(report.hitRatio == 1)
        #expect(report.verificationErrors == 0 && report.errors == 0)
        #expect(report.latencyMicroseconds.p99 >= report.latencyMicroseconds.p50)
    }

    @Test(
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/memcached"), "memcached is not installed")
    )
    func loadsMemcached() throws {
        let port = Int.random(in: 20_000...40_000)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/memcached")
        process.arguments = ["-u", "nobody", "-l", "127.0.0.1", "-p", "\(port)", "-m", "64"]
        try process.run()
        defer {
            // SIGKILL: memcached may inherit a blocked SIGTERM from the test runner.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        var configuration = BenchConfiguration()
        configuration.protocolKind = .memcache
        configuration.targets = [("127.0.0.1", port)]
        configuration.connections = 2
        configuration.keys = 200
        configuration.prefill = true
        configuration.duration = nil
        configuration.requests = 2_000
        var report: BenchReport?
        for _ in 0..<50 where report == nil {
            report = try? CachetBench.run(configuration)
            if report == nil { Thread.sleep(forTimeInterval: 0.05) }
        }
        let result = try #require(report)
        #expect(result.requests == 2_000 && result.verificationErrors == 0 && result.hitRatio == 1)
    }

    @Test func theExecutableReportsJSON() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-bench"))
        process.arguments = [
            "--port", "\(node.port)", "--requests", "1000", "--connections", "2", "--keys", "100", "--prefill",
            "--json", "--quiet",
        ]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(object["requests"] as? Int == 1000)
        #expect(object["verificationErrors"] as? Int == 0)
    }

    @Test func aRefusedConnectionIsExitTwo() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-bench"))
        process.arguments = ["--port", "1", "--requests", "10", "--quiet"]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = Pipe()
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 2)
        #expect(
            String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).contains(
                "cannot connect to 127.0.0.1:1"
            )
        )
    }
}
