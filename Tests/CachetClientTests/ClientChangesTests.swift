import CachetClient
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `CachetClient.changes(prefix:)` against real nodes: the streams of every member merged, typed values,
/// and a member killed and restarted, whose stream comes back after a GAP (a new run).
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
}
