import CachetCLIKit
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `cachet-cli watch`: its words, its lines, and the executable printing a node's changes as they happen.
@Suite("cachet-cli watch", .dedicatedThreads)
struct CachetCLIWatchTests {
    @Test func theWordsAfterWatch() throws {
        let options = try CachetCLIWatch.Options(
            words: ["user:", "--values", "--from", "ff:12"].map { Array($0.utf8) }
        )
        #expect(options.prefix == Array("user:".utf8) && options.values)
        #expect(options.from == CachetWatchPosition(run: 0xff, sequence: 12))
        #expect(try CachetCLIWatch.Options(words: []).prefix.isEmpty)
        #expect(throws: CachetCLIError.self) { try CachetCLIWatch.Options(words: [Array("--from".utf8)]) }
        #expect(throws: CachetCLIError.self) { try CachetCLIWatch.Options(words: ["a", "b"].map { Array($0.utf8) }) }
        let put = CachetEvent(kind: .put, sequence: 7, ttl: 60, key: Array("user:1".utf8), value: Array("Ada".utf8))
        #expect(CachetCLIWatch.line(put) == "7 put user:1 = Ada (ttl 60 s)")
        #expect(
            CachetCLIWatch.line(CachetEvent(kind: .gap, sequence: 9, key: []), member: "n1").hasPrefix("[n1] 9 gap")
        )
    }

    @Test func theExecutablePrintsEachChangeUntilInterrupted() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-cli"))
        process.arguments = ["--port", "\(node.port)", "watch", "user:", "--values"]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        let reader = output.fileHandleForReading
        var text = ""
        func waitFor(_ needle: String) -> Bool {
            let deadline = Date().addingTimeInterval(10)
            while !text.contains(needle) && Date() < deadline {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            return text.contains(needle)
        }
        #expect(waitFor("watching 'user:'"), "\(text)")
        let writer = try node.connect()
        #expect(try writer.roundTrip(.put(key: Array("user:1".utf8), value: Array("Ada".utf8), ttl: 0)).status == .ok)
        #expect(try writer.roundTrip(.put(key: Array("order:1".utf8), value: Array("x".utf8), ttl: 0)).status == .ok)
        #expect(try writer.roundTrip(.delete(key: Array("user:1".utf8))).status == .ok)
        #expect(waitFor("delete user:1"), "\(text)")
        #expect(text.contains("put user:1 = Ada") && !text.contains("order:1"), "\(text)")
        process.interrupt()
        process.waitUntilExit()
    }
}
