import CachetClient
import CachetIO
import CachetTestSupport
import Dispatch
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A local listener that answers every connection with bytes that are not Cachet replies.
final class GarbageServer: @unchecked Sendable {
    // `fd` is set in init and closed once in `stop()`; the accept thread only reads it.
    let port: Int
    private let fd: Int32
    private let done = DispatchSemaphore(value: 0)

    init() throws {
        (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        let fd = self.fd
        let done = self.done
        Thread.detachNewThread {
            var clients: [Int32] = []
            // Serve for at most 10 s, polling so that `stop()` ends the thread.
            let deadline = ContinuousClock.now + .seconds(10)
            while ContinuousClock.now < deadline && done.wait(timeout: .now()) == .timedOut {
                var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&pfd, 1, 20) > 0, let client = try? CachetSocket.accept(fd) else { continue }
                let junk = Array("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".utf8)
                _ = junk.withUnsafeBytes { CachetSocket.send(client, $0) }
                clients.append(client)
            }
            for client in clients { CachetSocket.close(client) }
            CachetSocket.close(fd)
        }
    }

    func stop() { done.signal() }
}

@Suite("CachetClient failures")
struct ClientFailureTests {
    @Test("a closed port fails fast with connectionFailed, marks the node down, then unavailable at once")
    func refusedConnection() async throws {
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: closedPort())])
        configuration.requestTimeout = .seconds(2)
        try await withClient(configuration) { client in
            let (error, took, stall) = await measureWithStalls {
                await expectFailure(.connectionFailed) { () throws(CachetClientError) in
                    _ = try await client.get("k")
                }
            }
            #expect(took < .milliseconds(500) + stall)
            #expect(error?.node == configuration.nodes[0].id)
            #expect(error?.underlying != nil)
            #expect(!client.isUp(node: configuration.nodes[0].id))
            let (_, second, secondStall) = await measureWithStalls {
                await expectFailure(.unavailable) { () throws(CachetClientError) in
                    try await client.put("k", value: [1])
                }
            }
            #expect(second < .milliseconds(50) + secondStall)
        }
    }

    @Test("a closed port among live nodes: its keys go to their stand-ins")
    func refusedConnectionFailover() async throws {
        let cluster = try await NodeCluster.start(count: 2)
        var configuration = cluster.configuration()
        configuration.nodes.append(.init(host: "127.0.0.1", port: closedPort()))
        try await withClient(configuration) { client in
            let dead = configuration.nodes[2].id
            let keys = (0..<300).map { "standin:\($0)" }
            #expect(keys.contains { client.owner(of: $0).id == dead })
            for key in keys { try await client.put(key, value: Array(key.utf8)) }
            for key in keys { #expect(try await client.get(key) == Array(key.utf8)) }
            #expect(!client.isUp(node: dead))
        }
    }

    @Test("a peer that answers garbage fails the request with protocolViolation, not a hang or a crash")
    func garbage() async throws {
        let server = try GarbageServer()
        defer { server.stop() }
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: server.port)])
        configuration.requestTimeout = .seconds(2)
        try await withClient(configuration) { client in
            let (_, took, stall) = await measureWithStalls {
                await expectFailure(.protocolViolation) { () throws(CachetClientError) in
                    _ = try await client.get("k")
                }
            }
            #expect(took < .seconds(1) + stall)
        }
    }

    // On dedicated threads: the test's own steps (the sleeps, the cancel, SIGCONT) must not wait for a pool
    // thread while the frozen node's requests run against their timeout.
    @Test(
        "cancelling one request fails it at once; another on the same connection still gets its reply",
        .dedicatedThreads
    )
    func cancellation() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        let pid = cluster.processes[0].process.processIdentifier
        defer { kill(pid, SIGCONT) }
        let configuration = cluster.configuration(timeout: .seconds(5)) { $0.connectionsPerNode = 1 }
        try await withClient(configuration) { client in
            try await client.put("kept", value: [7])
            await freeze(pid)
            let cancelled = Task(executorPreference: DedicatedThreadExecutor()) {
                () throws(CachetClientError) -> [UInt8]? in try await client.get("kept")
            }
            let kept = Task(executorPreference: DedicatedThreadExecutor()) {
                () throws(CachetClientError) -> [UInt8]? in try await client.get("kept")
            }
            try await Task.sleep(for: .milliseconds(100))
            await expectCancelledPromptly(cancelled)
            kill(pid, SIGCONT)
            #expect(try await kept.value == [7])
            // A task cancelled before it calls fails at once, without sending.
            let early = Task { () throws(CachetClientError) -> [UInt8]? in
                withUnsafeCurrentTask { $0?.cancel() }
                return try await client.get("kept")
            }
            await #expect(throws: CachetClientError.self) { try await early.value }
            #expect(try await client.get("kept") == [7])
        }
    }

    @Test("shutdown with requests in flight: they are answered, later calls fail with shutdown", .dedicatedThreads)
    func shutdownInFlight() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        let pid = cluster.processes[0].process.processIdentifier
        defer { kill(pid, SIGCONT) }
        let client = try CachetClient(configuration: cluster.configuration(timeout: .seconds(5)))
        try await client.put("k", value: [1, 2])
        await freeze(pid)
        // Unstructured tasks go to the task pool unless told otherwise, and the pool may be busy with other
        // tests for longer than the 100 ms this test gives each step: these run on threads of their own.
        let inFlight = (0..<5).map { _ in
            Task(executorPreference: DedicatedThreadExecutor()) { () throws(CachetClientError) -> [UInt8]? in
                try await client.get("k")
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        let shutdown = Task(executorPreference: DedicatedThreadExecutor()) { await client.shutdown() }
        try await Task.sleep(for: .milliseconds(100))
        await expectFailure(.shutdown) { () throws(CachetClientError) in _ = try await client.get("k") }
        kill(pid, SIGCONT)
        for task in inFlight { #expect(try await task.value == [1, 2]) }
        await shutdown.value
        await expectFailure(.shutdown) { () throws(CachetClientError) in try await client.put("k", value: []) }
        await client.shutdown()  // again: nothing happens
    }
}
