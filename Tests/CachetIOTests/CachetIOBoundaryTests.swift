import CEpoll
import CachetIO
import Foundation
import Testing

/// CachetIO is the one module that talks to epoll: the event masks it hands its channels are the kernel's,
/// and no other source target imports CEpoll.
@Suite("CachetIO's boundary")
struct CachetIOBoundaryTests {
    @Test func theEventMasksAreTheKernels() {
        #expect(CachetChannel.Events.readable.rawValue == cachet_EPOLLIN)
        #expect(CachetChannel.Events.writable.rawValue == cachet_EPOLLOUT)
        #expect(CachetChannel.Events.readHangup.rawValue == cachet_EPOLLRDHUP)
        #expect(CachetChannel.Events.hangup.rawValue == cachet_EPOLLHUP)
        #expect(CachetChannel.Events.error.rawValue == cachet_EPOLLERR)
    }

    @Test func noTargetButCachetIOImportsCEpoll() throws {
        let sources = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources")
        let files = try #require(FileManager.default.enumerator(atPath: sources.path)).compactMap { $0 as? String }
        var checked = 0
        for file in files where file.hasSuffix(".swift") && !file.hasPrefix("CachetIO/") {
            checked += 1
            let text = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
            let imports = text.split(separator: "\n").contains { $0.hasSuffix("import CEpoll") }
            #expect(!imports, "Sources/\(file) imports CEpoll")
        }
        #expect(checked > 100, "only \(checked) source files found")
    }
}
