import CachetClient
import CachetRing
import CachetTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The client over three independent nodes: routing, concurrency, and nodes that die or freeze.
@Suite("CachetClient against three nodes", .serialized)
struct ClientClusterTests {
    /// The value task `task` writes in its `version`-th write of key `index`: its length varies with all
    /// three, so a value served for the wrong key or the wrong write is caught.
    static func value(task: Int, index: Int, version: Int) -> [UInt8] {
        let seed = task &* 7919 &+ index &* 104_729 &+ version &* 31
        let count = (seed % 97) + (version % 3) * 40
        return (0..<count).map { UInt8(truncatingIfNeeded: seed &+ $0) }
    }

    @Test("items spread over the nodes as the ring says")
    func spreadByRing() async throws {
        let cluster = try await NodeCluster.start(count: 3)
        try await withClient(cluster.configuration()) { client in
            let ring = try CachetRing(members: cluster.nodes.map(\.id))
            var expected = [String: Int64]()
            var entries: [String: [UInt8]] = [:]
            for index in 0..<3000 {
                let key = "spread:\(index)"
                entries[key] = Array(key.utf8)
                expected[ring.members[ring.owner(of: key)], default: 0] += 1
                #expect(client.owner(of: key).id == ring.members[ring.owner(of: key)])
            }
            try await client.put(entries)
            let stats = try await client.stats()
            #expect(stats.map(\.node) == cluster.nodes.map(\.id))
            for node in stats {
                #expect(node.items == expected[node.node], "node \(node.node)")
                #expect((expected[node.node] ?? 0) > 500)
            }
            let keys = entries.keys.sorted()
            let values = try await client.get(keys)
            #expect(values == keys.map { Array($0.utf8) })
            let cleared = try await client.clear()
            #expect(cleared.map(\.items).reduce(0, +) == 3000)
        }
    }

    @Test("50 tasks x 1000 mixed operations, every value checked")
    func concurrentMixed() async throws {
        let cluster = try await NodeCluster.start(count: 3)
        try await withClient(cluster.configuration(timeout: .seconds(5))) { client in
            try await withThrowingTaskGroup(of: Int.self) { group in
                for task in 0..<50 {
                    group.addTask {
                        var model: [Int: [UInt8]] = [:]
                        var random = SplitMix64(state: UInt64(task + 1))
                        var checked = 0
                        for step in 0..<1000 {
                            let index = Int(random.next() % 40)
                            let key = "mixed:\(task):\(index)"
                            switch random.next() % 10 {
                            case 0..<4:
                                let value = Self.value(task: task, index: index, version: step)
                                try await client.put(key, value: value)
                                model[index] = value
                            case 4..<9:
                                let value = try await client.get(key)
                                #expect(value == model[index], "task \(task) step \(step) key \(key)")
                                checked += 1
                            default:
                                let removed = try await client.delete(key)
                                #expect(removed == (model[index] != nil), "task \(task) step \(step) key \(key)")
                                model[index] = nil
                            }
                        }
                        return checked
                    }
                }
                var checked = 0
                for try await count in group { checked += count }
                #expect(checked > 20_000)
            }
        }
    }

    @Test("a node killed with SIGKILL mid-run: other nodes' keys keep working, its keys fail over or fail fast")
    func killedNode() async throws {
        let cluster = try await NodeCluster.start(count: 3)
        let timeout = Duration.milliseconds(500)
        try await withClient(cluster.configuration(timeout: timeout)) { client in
            let victim = cluster.node(1).id
            let victimPID = cluster.processes[1].process.processIdentifier
            let start = ContinuousClock.now
            let killAt = start + .milliseconds(300)
            let stopAt = start + .milliseconds(1200)
            let killer = Task {
                try await Task.sleep(until: killAt)
                kill(victimPID, SIGKILL)
            }
            let (results, _, stall) = try await measureWithStalls {
                try await withThrowingTaskGroup(of: (ok: Int, failed: Int, slowest: Duration).self) { group in
                    for task in 0..<8 {
                        group.addTask {
                            var ok = 0
                            var failed = 0
                            var slowest = Duration.zero
                            var step = 0
                            var model: [String: [UInt8]] = [:]
                            while ContinuousClock.now < stopAt {
                                step += 1
                                let key = "kill:\(task):\(step % 30)"
                                let owner = client.owner(of: key).id
                                let began = ContinuousClock.now
                                do {
                                    if step % 3 == 0 {
                                        let value = Self.value(task: task, index: step % 30, version: step)
                                        try await client.put(key, value: value)
                                        model[key] = value
                                    } else {
                                        let value = try await client.get(key)
                                        if owner != victim {
                                            #expect(value == model[key], "a live node's key \(key) read wrong")
                                        }
                                    }
                                    ok += 1
                                } catch let error as CachetClientError {
                                    failed += 1
                                    #expect(owner == victim, "a live node's key failed: \(error)")
                                    #expect(
                                        [CachetClientError.Code.connectionFailed, .unavailable, .timeout].contains(
                                            error.code
                                        ),
                                        "\(error)"
                                    )
                                    // The victim's keys may have landed on a stand-in: forget them.
                                    model[key] = nil
                                }
                                slowest = max(slowest, ContinuousClock.now - began)
                            }
                            return (ok, failed, slowest)
                        }
                    }
                    var total = (ok: 0, failed: 0, slowest: Duration.zero)
                    for try await result in group {
                        total.ok += result.ok
                        total.failed += result.failed
                        total.slowest = max(total.slowest, result.slowest)
                    }
                    return total
                }
            }
            #expect(results.slowest < timeout + .milliseconds(250) + stall, "a call took \(results.slowest)")
            try await killer.value
            #expect(results.ok > 100)
            #expect(!client.isUp(node: victim))
            // After the kill, the victim's keys are served by their stand-ins.
            let victimKey = (0..<1000).map { "after:\($0)" }.first { client.owner(of: $0).id == victim }!
            try await client.put(victimKey, value: [1, 2, 3])
            #expect(try await client.get(victimKey) == [1, 2, 3])
        }
    }

    @Test("a frozen node (SIGSTOP) trips the timeout, is marked down, and comes back after SIGCONT")
    func frozenNode() async throws {
        let cluster = try await NodeCluster.start(count: 2)
        let timeout = Duration.milliseconds(300)
        let frozen = cluster.processes[0].process.processIdentifier
        defer { kill(frozen, SIGCONT) }
        let configuration = cluster.configuration(timeout: timeout) {
            $0.timeoutsBeforeDown = 3
            $0.probeInitialBackoff = .milliseconds(50)
            $0.probeMaximumBackoff = .milliseconds(200)
        }
        try await withClient(configuration) { client in
            let node = cluster.node(0).id
            let keys = (0..<1000).map { "frozen:\($0)" }.filter { client.owner(of: $0).id == node }
            // The first request opens the connection; on a loaded machine give it a few tries.
            let warm = ContinuousClock.now + .seconds(5)
            while (try? await client.put(keys[0], value: [9])) == nil && ContinuousClock.now < warm {}
            // If the warm-up timed out often enough to mark the node down, wait for its probe.
            while !client.isUp(node: node) && ContinuousClock.now < warm {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(try await client.get(keys[0]) == [9])
            await freeze(frozen)
            var timeouts = 0
            for key in keys.prefix(3) {
                let (_, took, stall) = await measureWithStalls {
                    await expectFailure(.timeout) { () throws(CachetClientError) in _ = try await client.get(key) }
                }
                #expect(took >= timeout && took < timeout + .milliseconds(250) + stall, "took \(took)")
                timeouts += 1
            }
            #expect(timeouts == 3)
            #expect(!client.isUp(node: node))
            // Its keys now go to the other node: a miss there, at once.
            let (value, took, stall) = try await measureWithStalls { try await client.get(keys[0]) }
            #expect(value == nil)
            #expect(took < .milliseconds(100) + stall)

            kill(frozen, SIGCONT)
            let deadline = ContinuousClock.now + .seconds(5)
            while !client.isUp(node: node) && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(client.isUp(node: node))
            #expect(try await client.get(keys[0]) == [9])
        }
    }
}
