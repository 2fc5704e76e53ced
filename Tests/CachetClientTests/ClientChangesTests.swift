import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

@testable import CachetClient

#if canImport(Glibc)
import Glibc
#endif

/// `CachetClient.changes(prefix:)` against real nodes: the streams of every member merged, typed values,
/// a member killed and restarted, whose stream comes back after a GAP (a new run), and the end of a
/// stream: its task cancelled (the node sees its watcher go, the client's loop keeps no channel or timer of
/// it) or its client shut down (the stream ends with `shutdown`).
@Suite("CachetClient: watching changes", .serialized)
struct ClientChangesTests {
    struct User: Codable, Sendable, Equatable {
        var name: String
    }

    /// The changes seen so far.
    final class Collected: @unchecked Sendable {
        private let lock = NSLock()
        private var changes: [CachetChange] = []
        func append(_ change: CachetChange) { lock.withLock { changes.append(change) } }
        var all: [CachetChange] { lock.withLock { changes } }

        /// Waits until `done` says so or `limit` passes, and returns the changes seen by then.
        func wait(
            until done: ([CachetChange]) -> Bool,
            for limit: Duration = .seconds(10)
        ) async -> [CachetChange] {
            let deadline = ContinuousClock.now + limit
            while ContinuousClock.now < deadline {
                if done(all) { return all }
                try? await Task.sleep(for: .milliseconds(20))
            }
            return all
        }
    }

    @Test func theChangesOfEveryMemberAreMergedAndAMemberThatRestartsComesBackAfterAGap() async throws {
        var processes: [NodeProcess] = []
        for _ in 0..<3 { processes.append(try await NodeProcess.start(arguments: ["--disk-limit", "0"])) }
        let ports = processes.map(\.port)
        let nodes = ports.map { CachetClient.Node(host: "127.0.0.1", port: $0) }
        var configuration = CachetClient.Configuration(nodes: nodes)
        configuration.requestTimeout = .seconds(5)
        configuration.connectTimeout = .seconds(2)
        let client = try CachetClient(configuration: configuration)
        let collected = Collected()
        let watching = Task {
            for try await change in client.changes(prefix: "w:", values: true) { collected.append(change) }
        }
        // Every member is watching before the writes: a key of each member is written until its event shows
        // (the stream opens each member's WATCH on its own; on a loaded machine that may take a while).
        for node in nodes {
            let probe = (0...).lazy.map { "w:ready:\($0)" }.first { client.owner(of: $0).id == node.id }!
            let deadline = ContinuousClock.now + .seconds(20)
            while !collected.all.contains(where: { $0.keyString == probe }), ContinuousClock.now < deadline {
                try await client.put(probe, value: User(name: probe))
                _ = await collected.wait(until: { $0.contains { $0.keyString == probe } }, for: .milliseconds(500))
            }
        }
        let ready = collected.all.count
        let keys = (0..<30).map { "w:\($0)" }
        for key in keys { try await client.put(key, value: User(name: key)) }
        try await client.put("other:1", value: User(name: "not watched"))
        var changes = Array(await collected.wait { $0.count >= ready + keys.count }.dropFirst(ready))
        #expect(Set(changes.map(\.keyString)) == Set(keys), "\(changes.map(\.keyString))")
        #expect(Set(changes.map(\.node)).count == 3, "changes from every member")
        for change in changes { #expect(try change.value(as: User.self)?.name == change.keyString) }
        // Per member, in order.
        for node in Set(changes.map(\.node)) {
            let sequences = changes.filter { $0.node == node }.map(\.position.sequence)
            #expect(sequences == sequences.sorted())
        }

        // Member 0 is killed and comes back on its port: a new run, so its stream resumes with a GAP.
        let restarted = nodes[0].id
        #expect(await processes[0].terminate(signal: SIGKILL) != nil)
        processes[0] = try await NodeProcess.start(arguments: ["--disk-limit", "0", "--port", "\(ports[0])"])
        changes = await collected.wait { $0.contains { $0.kind == .gap && $0.node == restarted } }
        #expect(changes.contains { $0.kind == .gap && $0.node == restarted })
        let owned = (0...).lazy.map { "w:after:\($0)" }.first { client.owner(of: $0).id == restarted }!
        try await client.put(owned, value: User(name: owned))
        changes = await collected.wait { $0.contains { $0.keyString == owned } }
        #expect(changes.contains { $0.keyString == owned && $0.kind == .put && $0.node == restarted })
        watching.cancel()
        await client.shutdown()
        _ = processes
    }

    /// How a stream ended: nil while it goes on, `.some(nil)` when it finished, `.some(error)` when it threw.
    final class Ending: @unchecked Sendable {
        private let lock = NSLock()
        private var ended: (any Error)??
        func record(_ error: (any Error)?) { lock.withLock { ended = .some(error) } }
        var outcome: (any Error)?? { lock.withLock { ended } }
    }

    /// The node's `watchers` figure (its STATS).
    static func watchers(of node: NodeProcess) throws -> Int {
        try #require(node.stats()["watchers"] as? Int)
    }

    /// Waits until `done` holds or `limit` passes; returns whether it held.
    static func eventually(within limit: Duration, _ done: () throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if try done() { return true }
            try await Task.sleep(for: .milliseconds(10))
        }
        return try done()
    }

    /// The client's loop: its channels and timers, and the watches its transport keeps.
    static func loopFigures(_ client: CachetClient) -> (channels: Int, timers: Int, watches: Int) {
        let transport = client.transport
        return transport.loop.executeAndWait {
            (transport.loop.channelCount, transport.loop.timerCount, transport.watchCount)
        }
    }

    /// A client of one live node and one port nothing listens on: the second node's watch fails to
    /// connect and waits on the backoff timer, over and over.
    static func clientOfALiveAndADeadNode(_ live: NodeProcess) throws -> CachetClient {
        var configuration = CachetClient.Configuration(
            nodes: [.init(host: "127.0.0.1", port: live.port), .init(host: "127.0.0.1", port: closedPort())]
        )
        configuration.requestTimeout = .seconds(5)
        configuration.connectTimeout = .seconds(2)
        return try CachetClient(configuration: configuration)
    }

    @Test func cancellingTheStreamsTaskClosesItsConnectionsAndCancelsItsTimersAtOnce() async throws {
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        let client = try Self.clientOfALiveAndADeadNode(node)
        let watching = Task {
            for try await _ in client.changes(prefix: "c:") {}
        }
        #expect(try await Self.eventually(within: .seconds(10)) { try Self.watchers(of: node) == 1 })
        // The dead node's watch has a timer at every moment: its connect's, or its backoff's.
        #expect(try await Self.eventually(within: .seconds(5)) { Self.loopFigures(client).timers > 0 })
        #expect(Self.loopFigures(client).watches == 2)

        watching.cancel()
        // Nothing polls: the connection closes as the stream ends, so the node sees it go at once (2 s is
        // for a loaded machine).
        let gone = try await Self.eventually(within: .seconds(2)) { try Self.watchers(of: node) == 0 }
        let left = try Self.watchers(of: node)
        #expect(gone, "the node still counts \(left) watcher(s)")
        let figures = Self.loopFigures(client)
        #expect(figures.channels == 0, "channels left on the client's loop")
        #expect(figures.timers == 0, "timers left on the client's loop")
        #expect(figures.watches == 0, "watches left in the client's transport")
        await client.shutdown()
        _ = await node.terminate()
    }

    /// Iterates `stream` in a task of its own; the returned box says how it ended.
    static func follow(_ stream: AsyncThrowingStream<CachetChange, any Error>) -> (Ending, Task<Void, Never>) {
        let ending = Ending()
        let task = Task {
            do {
                for try await _ in stream {}
                ending.record(nil)
            } catch {
                ending.record(error)
            }
        }
        return (ending, task)
    }

    @Test func theStreamEndsWithShutdownWhenTheClientShutsDown() async throws {
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        let client = try Self.clientOfALiveAndADeadNode(node)
        let (ending, watching) = Self.follow(client.changes(prefix: "s:"))
        #expect(try await Self.eventually(within: .seconds(10)) { try Self.watchers(of: node) == 1 })
        await client.shutdown()
        #expect(try await Self.eventually(within: .seconds(2)) { ending.outcome != nil }, "the stream goes on")
        let error = ending.outcome ?? nil
        #expect((error as? CachetClientError)?.code == .shutdown, "\(String(describing: error))")
        watching.cancel()
        #expect(try await Self.eventually(within: .seconds(2)) { try Self.watchers(of: node) == 0 })

        // A stream asked for after the shutdown ends at once.
        var iterator = client.changes().makeAsyncIterator()
        await #expect(throws: CachetClientError.self) { _ = try await iterator.next() }
        _ = await node.terminate()
    }

    /// A stream whose every node is down has no connection for the loop's stop to close: its watches wait
    /// on timers, which a stopped loop drops. The client's shutdown ends it all the same.
    @Test func aStreamWaitingToConnectEndsWithShutdownToo() async throws {
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: closedPort())])
        configuration.connectTimeout = .seconds(2)
        let client = try CachetClient(configuration: configuration)
        let (ending, watching) = Self.follow(client.changes())
        // Refused a few times: the backoff has grown past the first 100 ms.
        try await Task.sleep(for: .milliseconds(400))
        await client.shutdown()
        #expect(try await Self.eventually(within: .seconds(2)) { ending.outcome != nil }, "the stream goes on")
        let error = ending.outcome ?? nil
        #expect((error as? CachetClientError)?.code == .shutdown, "\(String(describing: error))")
        watching.cancel()
    }
}
