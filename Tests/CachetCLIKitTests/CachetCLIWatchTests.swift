import CachetCLIKit
import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a process prints, read on a thread of its own, so that waiting for a line never blocks past its
/// deadline (a process that prints nothing more cannot hang the test).
final class ProcessOutput: @unchecked Sendable {
    private let lock = NSLock()
    private var text = ""

    init(_ pipe: Pipe) {
        let handle = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { return }
                lock.withLock { text += String(decoding: chunk, as: UTF8.self) }
            }
        }
    }

    var current: String { lock.withLock { text } }

    /// Waits up to `seconds` for `done` to hold of the output so far.
    func wait(seconds: Double = 10, until done: (String) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !done(current) && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        return done(current)
    }
}

/// Starts the built `cachet-cli` with `arguments`, its output read as it comes.
func startCLI(_ arguments: [String]) throws -> (Process, ProcessOutput) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-cli"))
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    return (process, ProcessOutput(pipe))
}

/// Ends a process: SIGINT (a watch exits 0), then SIGKILL if it is still running after 5 s.
func interruptAndReap(_ process: Process) {
    guard process.isRunning else { return }
    process.interrupt()
    let deadline = Date().addingTimeInterval(5)
    while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    process.waitUntilExit()
}

/// `cachet-cli watch`: its words, its lines, and the executable printing a node's changes as they happen.
@Suite("cachet-cli watch", .dedicatedThreads, .timeLimit(.minutes(2)))
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
        // An unknown option is a usage error, not a prefix to wait on; after --, it is the prefix.
        do {
            _ = try CachetCLIWatch.Options(words: [Array("--bogus".utf8)])
            Issue.record("--bogus was taken as a prefix")
        } catch {
            #expect(error.code == .usage && error.message.contains("unknown option --bogus"), "\(error.message)")
        }
        #expect(
            try CachetCLIWatch.Options(words: ["--", "--odd"].map { Array($0.utf8) }).prefix == Array("--odd".utf8)
        )
        #expect(try CachetCLIWatch.Options(words: ["--values", "--", "--odd"].map { Array($0.utf8) }).values)
        #expect(throws: CachetCLIError.self) {
            try CachetCLIWatch.Options(words: ["--", "a", "b"].map { Array($0.utf8) })
        }
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
        let (process, output) = try startCLI(["--port", "\(ports[0])", "--cluster", "watch", "c:"])
        defer { interruptAndReap(process) }
        #expect(
            output.wait { $0.contains("[n1] watching") && $0.contains("[n2] watching") },
            "\(output.current)"
        )
        // Written through each member (forwarded to the key's owner when it is the other), every key is
        // announced by the member that stores it. Just after the start, while the members' views of each
        // other still differ, a write may be taken and its value dropped (a confirmation: nothing stored,
        // nothing announced), so each write is repeated until its event shows.
        for (index, node) in nodes.enumerated() {
            let socket = try node.connect()
            let key = "c:\(index + 1)"
            let deadline = Date().addingTimeInterval(15)
            while !output.current.contains("put \(key)") && Date() < deadline {
                _ = try socket.roundTrip(.put(key: Array(key.utf8), value: [1], ttl: 0), id: 1)
                _ = output.wait(seconds: 0.5) { $0.contains("put \(key)") }
            }
        }
        #expect(output.current.contains("put c:1") && output.current.contains("put c:2"), "\(output.current)")
        #expect(output.current.split(separator: "\n").filter { $0.contains(" put ") }.allSatisfy { $0.hasPrefix("[n") })
    }

    @Test func theExecutablePrintsEachChangeUntilInterrupted() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let (process, output) = try startCLI(["--port", "\(node.port)", "watch", "user:", "--values"])
        defer { interruptAndReap(process) }
        #expect(output.wait { $0.contains("watching 'user:'") }, "\(output.current)")
        let writer = try node.connect()
        #expect(try writer.roundTrip(.put(key: Array("user:1".utf8), value: Array("Ada".utf8), ttl: 0)).status == .ok)
        #expect(try writer.roundTrip(.put(key: Array("order:1".utf8), value: Array("x".utf8), ttl: 0)).status == .ok)
        #expect(try writer.roundTrip(.delete(key: Array("user:1".utf8))).status == .ok)
        #expect(output.wait { $0.contains("delete user:1") }, "\(output.current)")
        #expect(output.current.contains("put user:1 = Ada") && !output.current.contains("order:1"), "\(output.current)")
        interruptAndReap(process)
        #expect(process.terminationStatus == 0, "a watch ends with status 0 when interrupted")
    }
}
