import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Starts an in-process node on an ephemeral port, runs `body`, and shuts the node down even if it throws.
func withNode<R>(
    _ configure: (inout CachetNodeConfiguration) -> Void = { _ in },
    _ body: (CachetNodeServer, Int) throws -> R
) throws -> R {
    var configuration = CachetNodeConfiguration()
    configuration.port = 0
    configuration.memoryLimit = 64 << 20
    configure(&configuration)
    var logger = Logger(label: "cachet.test")
    logger.logLevel = .warning
    let server = try CachetNodeServer(configuration: configuration, logger: logger)
    let port = try server.start()
    defer { server.shutdown(timeout: 5) }
    return try body(server, port)
}

extension Array where Element == UInt8 {
    init(_ text: String) { self = Array(text.utf8) }
}

/// Whether this test process runs under AddressSanitizer (`swift test --sanitize=address`), whose allocator
/// replaces glibc's (no arenas, no `mallopt`) and keeps freed memory in quarantine, so the resident size of
/// the sanitized node says nothing about its own bounds.
let underAddressSanitizer = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__asan_init") != nil

/// Polls a node's STATS (`stats`) until it reports member `id` as `state`, for at most `seconds`; returns
/// the last state seen (nil when the member was never listed).
func waitForMemberState(
    of id: String,
    toBe state: String,
    within seconds: Double,
    stats: () throws -> [String: Any]
) throws -> String? {
    let deadline = Date().addingTimeInterval(seconds)
    var last: String?
    repeat {
        let members = try stats()["cluster_members"] as? [[String: Any]] ?? []
        last = members.first { $0["id"] as? String == id }?["state"] as? String
        if last == state { return last }
        Thread.sleep(forTimeInterval: 0.05)
    } while Date() < deadline
    return last
}
