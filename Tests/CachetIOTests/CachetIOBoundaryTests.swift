import CEpoll
import CachetIO
import Foundation
import Testing

/// CachetIO is the one module that talks to epoll and to sockets: the event masks it hands its channels are
/// the kernel's, no other source target imports CEpoll, and none calls a socket function itself
/// (``SocketCallScanner``). Test targets are not held to it: some make raw socket calls on purpose (a
/// reset, a half-close, a tiny receive buffer).
@Suite("CachetIO's boundary")
struct CachetIOBoundaryTests {
    @Test func theEventMasksAreTheKernels() {
        #expect(CachetChannel.Events.readable.rawValue == cachet_EPOLLIN)
        #expect(CachetChannel.Events.writable.rawValue == cachet_EPOLLOUT)
        #expect(CachetChannel.Events.readHangup.rawValue == cachet_EPOLLRDHUP)
        #expect(CachetChannel.Events.hangup.rawValue == cachet_EPOLLHUP)
        #expect(CachetChannel.Events.error.rawValue == cachet_EPOLLERR)
    }

    /// The Swift files of every source target but CachetIO: path under `Sources/` and text.
    static func sourcesOutsideCachetIO() throws -> [(file: String, text: String)] {
        let sources = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources")
        let files = try #require(FileManager.default.enumerator(atPath: sources.path)).compactMap { $0 as? String }
        return try files.filter { $0.hasSuffix(".swift") && !$0.hasPrefix("CachetIO/") }.sorted().map {
            ($0, try String(contentsOf: sources.appendingPathComponent($0), encoding: .utf8))
        }
    }

    @Test func noTargetButCachetIOImportsCEpoll() throws {
        let sources = try Self.sourcesOutsideCachetIO()
        for (file, text) in sources {
            let imports = text.split(separator: "\n").contains { $0.hasSuffix("import CEpoll") }
            #expect(!imports, "Sources/\(file) imports CEpoll")
        }
        #expect(sources.count > 100, "only \(sources.count) source files found")
    }

    @Test func noTargetButCachetIOCallsASocketFunction() throws {
        let sources = try Self.sourcesOutsideCachetIO()
        for (file, text) in sources {
            let calls = SocketCallScanner.calls(in: text)
            #expect(
                calls.isEmpty,
                "Sources/\(file) calls \(calls): go through CachetIO (CachetSocket, CachetEventLoop and its channels)"
            )
        }
        #expect(sources.count > 100, "only \(sources.count) source files found")
    }

    @Test func theScannerTellsTheCFunctionsFromMethodsOfTheSameName() {
        let source = #"""
            import Glibc
            // socket(AF_INET, SOCK_STREAM, 0) in a comment /* bind(fd, address, length) */
            let message = "listen(fd, 16) in a string"
            func send(_ bytes: [UInt8]) {}
            enum Step { case send([UInt8]) }
            _ = Glibc.send(fd, pointer, count, 0)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            connection.send(bytes)
            let first = try connect(host, port)
            await send(on: node, deadline: deadline) { slot, id in slot.issue(id) }
            guard poll(&polls, nfds_t(polls.count), 100) > 0 else { continue }
            Glibc.shutdown(fd, Int32(SHUT_WR))
            shutdown()
            connection.pointee.output.send(a, b, c, d)
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            /* nested /* comment */ connect(fd, address, length) */
            """#
        let found = SocketCallScanner.calls(in: source)
        #expect(found.map(\.name) == ["send", "socket", "poll", "shutdown", "setsockopt"], "\(found)")
        #expect(found.map(\.line) == [6, 7, 11, 12, 15], "\(found)")
    }
}
