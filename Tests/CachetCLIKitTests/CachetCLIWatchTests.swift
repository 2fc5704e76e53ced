import CachetCLIKit
import CachetIO
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

    @Test func withClusterItWatchesEveryMemberAndMarksEachLine() throws {
        let directory = TemporaryDirectory(prefix: "cachet-cli-watch-cluster")
        defer { directory.remove() }
        let ports = try (0..<2).map { _ in
            let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
            CachetSocket.close(fd)
            return port
        }
        let file = directory.appending("cluster.json")
        let entries = ports.enumerated().map { "{\"id\": \"n\($0 + 1)\", \"host\": \"127.0.0.1\", \"port\": \($1)}" }
        try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}\n").utf8).write(
            to: URL(fileURLWithPath: file)
        )
        let nodes = try (1...2).map { index in
            try NodeProcess(arguments: [
                "--cluster", file, "--node-id", "n\(index)", "--port", "\(ports[index - 1])", "--disk-limit", "0",
                "--probe-interval", "0.1",
            ])
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-cli"))
        process.arguments = ["--port", "\(ports[0])", "--cluster", "watch", "c:"]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        var text = ""
        func waitFor(_ done: (String) -> Bool) -> Bool {
            let deadline = Date().addingTimeInterval(10)
            while !done(text) && Date() < deadline {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            return done(text)
        }
        #expect(waitFor { $0.contains("[n1] watching") && $0.contains("[n2] watching") }, "\(text)")
        // Written through each member (forwarded to the key's owner when it is the other), every key is
        // announced by its owner. A member that has just started may hold its keys for a moment: retried.
        for (index, node) in nodes.enumerated() {
            let socket = try node.connect()
            let key = Array("c:\(index + 1)".utf8)
            var status = CachetStatus.unavailable
            let deadline = Date().addingTimeInterval(10)
            while status != .ok && Date() < deadline {
                status = try socket.roundTrip(.put(key: key, value: [1], ttl: 0), id: 1).status
                if status != .ok { Thread.sleep(forTimeInterval: 0.1) }
            }
            #expect(status == .ok)
        }
        #expect(waitFor { $0.contains("put c:1") && $0.contains("put c:2") }, "\(text)")
        #expect(text.split(separator: "\n").filter { $0.contains(" put ") }.allSatisfy { $0.hasPrefix("[n") })
        process.interrupt()
        process.waitUntilExit()
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
