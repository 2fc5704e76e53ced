import CachetClient
import CachetTestSupport
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A rolling restart of a three-member cluster (each member sent SIGTERM, then started again on its data
/// directory, one after the other) under 50 CachetClient tasks: a member that stops tells its peers it is
/// leaving and answers nothing more, a request it left unanswered was not applied and goes elsewhere, and
/// a member that holds after its return passes its keys to the stand-in. No request fails, and no GET
/// returns a value older than the last one its task had acknowledged (`Protocol/CLUSTER.md`, "A member
/// that stops").
@Suite("CachetClient through a rolling restart", .serialized, .nodeTurn)
struct ClientRollingRestartTests {
    /// What the tasks saw.
    struct Tally: Sendable {
        var requests = 0
        var failures: [String] = []
        var stale: [String] = []
        var hits = 0
        var gets = 0

        mutating func add(_ other: Tally) {
            requests += other.requests
            failures += other.failures
            stale += other.stale
            hits += other.hits
            gets += other.gets
        }
    }

    /// Set once the load is to stop.
    final class StopFlag: Sendable {
        private let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .relaxed) }
        func set() { value.store(true, ordering: .relaxed) }
    }

    /// Task `task`'s load until `stop` is set: 20 keys of its own, each written with increasing versions and read
    /// back; a read must return the last version acknowledged, or miss.
    static func load(_ client: CachetClient, task: Int, until stop: StopFlag) async -> Tally {
        var tally = Tally()
        var acknowledged: [Int: Int] = [:]
        var uncertain: Set<Int> = []
        var random = SplitMix64(state: UInt64(task) &+ 101)
        var version = 0
        while !stop.isSet {
            let index = Int(random.next() % 20)
            let key = "roll:\(task):\(index)"
            tally.requests += 1
            let writing = random.next() % 3 == 0
            do {
                if writing {
                    version += 1
                    try await client.put(key, value: Array("\(version)".utf8))
                    acknowledged[index] = version
                    uncertain.remove(index)
                } else {
                    tally.gets += 1
                    guard let value = try await client.get(key) else { continue }
                    tally.hits += 1
                    let read = Int(String(decoding: value, as: UTF8.self)) ?? -1
                    // After a failed write of the key, any read is accepted until the next acknowledged one.
                    if !uncertain.contains(index) && read != acknowledged[index] {
                        tally.stale.append("\(key): read \(read), last acknowledged \(acknowledged[index] ?? -1)")
                    }
                }
            } catch {
                tally.failures.append("\(key): \(error)")
                // A failed write may or may not have been applied: any later read of the key is accepted.
                if writing { uncertain.insert(index) }
            }
        }
        return tally
    }

    @Test("SIGTERM and restart of each member in turn: no failed request, no stale value")
    func rollingRestart() async throws {
        let members = try await ClientClusterFileTests.Members.onThread { try ClientClusterFileTests.Members() }
        let configuration = try CachetClient.Configuration(clusterFile: members.file)
        try await Self.restart(["n1", "n2", "n3"], of: members, under: configuration)
    }

    /// A client that knows one member only, which forwards every other member's keys: the others are
    /// restarted in turn, and it is the one that must route around them.
    @Test("the same with every request sent to one member that is not restarted")
    func rollingRestartThroughOneMember() async throws {
        // The node's default forward deadline (1 s), not the suite's 0.3 s: n1 keeps sending a key to its owner
        // while the others see the owner up, even after forwards time out (`Protocol/CLUSTER.md`, "Health":
        // a member down by timeouts alone is not stood in for), and on a loaded machine 0.3 s forwards to a
        // member busy restarting time out now and then.
        let members = try await ClientClusterFileTests.Members.onThread {
            try ClientClusterFileTests.Members(extraArguments: ["--forward-timeout", "1"])
        }
        let configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: members.ports["n1"]!)])
        try await Self.restart(["n2", "n3"], of: members, under: configuration)
    }

    static func restart(
        _ ids: [String],
        of members: ClientClusterFileTests.Members,
        under configuration: CachetClient.Configuration
    ) async throws {
        var configuration = configuration
        configuration.requestTimeout = .seconds(2)
        configuration.connectTimeout = .seconds(1)
        configuration.probeMaximumBackoff = .milliseconds(200)
        try await withClient(configuration) { client in
            let done = StopFlag()
            async let tallies: Tally = withTaskGroup(of: Tally.self) { group in
                for task in 0..<50 {
                    group.addTask { await Self.load(client, task: task, until: done) }
                }
                var total = Tally()
                for await tally in group { total.add(tally) }
                return total
            }
            try await Task.sleep(for: .seconds(1))
            for id in ids {
                let status = await members.processes[id]!.terminate(signal: SIGTERM, timeout: 10)
                #expect(status == 0, "\(id) exited cleanly after SIGTERM")
                try await ClientClusterFileTests.Members.onThread { try members.start(id) }
                // Its peers and the client see it back; then the next one goes.
                try await Task.sleep(for: .seconds(1.5))
            }
            try await Task.sleep(for: .seconds(1))
            done.set()
            let total = await tallies
            // A floor that shows the load ran through the restarts, low enough for a loaded machine.
            #expect(total.requests > 1_000, "the load ran: \(total.requests) requests")
            #expect(total.failures.isEmpty, "\(total.failures.count) failed, first: \(total.failures.prefix(5))")
            #expect(total.stale.isEmpty, "\(total.stale.count) stale, first: \(total.stale.prefix(5))")
        }
    }
}
