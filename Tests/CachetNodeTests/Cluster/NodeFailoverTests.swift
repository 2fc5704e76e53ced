import CachetTestSupport
import CachetWire
import Dispatch
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Failover without stale reads (`Protocol/CLUSTER.md`): put v1 (owner A), A becomes unreachable, put v2
/// through another node, A returns — no GET through any node, nor from A itself, ever returns v1.
@Suite("Node: failover to a stand-in never serves an older value", .dedicatedThreads)
struct NodeFailoverTests {
    typealias Cluster = NodeForwardingTests.Cluster

    /// Probes every 0.1 s (backoff 25 ms doubling to 0.5 s), forwards time out after 0.3 s, so the hold
    /// is 2 × 0.5 + 0.3 = 1.3 s.
    static let timings = ["--probe-interval", "0.1", "--forward-timeout", "0.3"]

    /// GETs `key` through every live node, and from `owner` directly with `forwarded` set (what the owner
    /// itself holds), for `seconds`; returns every value seen.
    static func watch(_ key: String, cluster: Cluster, owner: String, seconds: Double) throws -> [[UInt8]] {
        var seen: [[UInt8]] = []
        let deadline = Date().addingTimeInterval(seconds)
        let sockets = try ["n1", "n2", "n3"].map { try cluster.node($0).connect() }
        repeat {
            for (index, socket) in sockets.enumerated() {
                let flags: CachetRequestFlags = ["n1", "n2", "n3"][index] == owner ? .forwarded : []
                for flag in Set([flags, []]) {
                    let reply = try NodeForwardingTests.get(key, from: socket, flags: flag)
                    if reply.status == .ok { seen.append(reply.body) }
                }
            }
            Thread.sleep(forTimeInterval: 0.02)
        } while Date() < deadline
        return seen
    }

    static func waitForDown(_ id: String, cluster: Cluster) throws {
        for other in ["n1", "n2", "n3"] where other != id {
            #expect(try cluster.waitForState(of: id, on: other, toBe: "down", within: 5) == "down", "\(id) on \(other)")
        }
    }

    /// Writes 4,100 other keys of `owner` to it through `socket` (connected to it) and waits until its
    /// disk tier holds them and the `alreadyOnDisk` entries written before, with nothing left queued.
    ///
    /// What was on the owner's disk before then comes back when it restarts after SIGKILL: its
    /// invalidation journal (`Protocol/DISK-FORMAT.md`) drops, at start-up, every key journaled since its
    /// last checkpoint, and it checkpoints once 4,096 operations have been journaled. Without this a value
    /// written just before a SIGKILL never comes back, and a test of what a restarted owner serves proves
    /// nothing.
    static func checkpointPastWhatIsOnDisk(
        _ cluster: Cluster,
        owner: String,
        socket: TestSocket,
        alreadyOnDisk: Int
    ) throws {
        let deadline = Date().addingTimeInterval(5)
        while (try cluster.stats(owner)["disk_items"] as? Int ?? 0) < alreadyOnDisk && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
        }
        #expect(try cluster.stats(owner)["disk_items"] as? Int == alreadyOnDisk, "the values on \(owner)'s disk")
        let fillers = Array((0...).lazy.map { "f\($0)" }.filter { cluster.owner(of: $0) == owner }.prefix(4100))
        for chunk in stride(from: 0, to: fillers.count, by: 500) {
            var batch: [UInt8] = []
            for (index, filler) in fillers[chunk..<min(chunk + 500, fillers.count)].enumerated() {
                CachetCommand.put(key: Array(filler.utf8), value: [1], ttl: 0).encode(id: UInt32(index), to: &batch)
            }
            try socket.send(batch)
            for _ in chunk..<min(chunk + 500, fillers.count) { #expect(try socket.readResponse().status == .ok) }
        }
        let applied = Date().addingTimeInterval(20)
        while Date() < applied {
            let stats = try cluster.stats(owner)
            if stats["disk_items"] as? Int == fillers.count + alreadyOnDisk && stats["disk_queue_depth"] as? Int == 0 {
                break
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(try cluster.stats(owner)["disk_items"] as? Int == fillers.count + alreadyOnDisk)
    }

    /// Polls GETs of `key` through `node` for at most `seconds`; returns the first value served (nil if none).
    static func firstServed(_ key: String, through node: String, cluster: Cluster, within seconds: Double) throws
        -> [UInt8]?
    {
        let socket = try cluster.node(node).connect()
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            let reply = try NodeForwardingTests.get(key, from: socket)
            if reply.status == .ok { return reply.body }
            Thread.sleep(forTimeInterval: 0.05)
        } while Date() < deadline
        return nil
    }

    /// Waits up to 10 s until member `id` no longer holds (STATS `holding`); returns whether it does not.
    static func waitUntilServing(_ id: String, cluster: Cluster) throws -> Bool {
        let deadline = Date().addingTimeInterval(10)
        while try cluster.stats(id)["holding"] as? Bool == true {
            guard Date() < deadline else { return false }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return true
    }

    /// v1 on the owner's disk, covered by a checkpoint, so that its restart after SIGKILL brings it back
    /// (a control key written with v1 and never overwritten shows it does, once the owner's hold is over):
    /// the stand-in's delivery and the owner's hold are all that keep v1 from being served. Fails with
    /// `--hold-period 0` (the restarted owner serves v1 before the stand-in has told it).
    @Test func anOwnerKilledAndRestartedWithItsDiskNeverServesTheOlderValue() throws {
        let cluster = try Cluster(extraArguments: Self.timings, disk: true)
        let key = cluster.key(ownedBy: "n1")
        let control = cluster.key(ownedBy: "n1", prefix: "control")
        let n1 = try cluster.node("n1").connect()
        for written in [key, control] {
            #expect(try n1.roundTrip(.put(key: Array(written.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        }
        try Self.checkpointPastWhatIsOnDisk(cluster, owner: "n1", socket: n1, alreadyOnDisk: 2)
        let n2 = try cluster.node("n2").connect()
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForDown("n1", cluster: cluster)

        #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0)).status == .ok)
        #expect(try NodeForwardingTests.get(key, from: try cluster.node("n3").connect()).body == Array("v2".utf8))

        try cluster.start("n1")
        let seen = try Self.watch(key, cluster: cluster, owner: "n1", seconds: 3)
        #expect(!seen.contains(Array("v1".utf8)), "v1 served after the owner's return")
        // The stand-in handed v2 back to the owner (v1 replaced there) and dropped its own copy: v2 through
        // every node, from the owner.
        for id in ["n1", "n2", "n3"] {
            #expect(
                try NodeForwardingTests.get(key, from: try cluster.node(id).connect()).body == Array("v2".utf8),
                "\(id)"
            )
        }
        // v1 really was on the owner's disk: once its hold (1.3 s, at most 4 × that) is over, it serves it
        // for the key no one overwrote.
        let restored = try Self.firstServed(control, through: "n1", cluster: cluster, within: 5)
        #expect(restored == Array("v1".utf8), "the control key after the owner's hold")
    }

    /// An owner back from an absence takes the writes of its keys sent to it while it holds (`Protocol/
    /// CLUSTER.md`, "The owner's hold"): once its stand-in has dropped its copy, the write is applied at the
    /// owner, so the owner serves it when its hold ends, through every member. Before, the write went to the
    /// stand-in, which confirmed it with the owner by a delete: acknowledged, and then a miss everywhere.
    @Test func writesTakenWhileTheOwnerHoldsAreServedOnceItsHoldEnds() throws {
        let cluster = try Cluster(extraArguments: Self.timings, disk: true)
        let key = cluster.key(ownedBy: "n1", prefix: "held")
        let deleted = cluster.key(ownedBy: "n1", prefix: "held-deleted")
        let n1 = try cluster.node("n1").connect()
        for written in [key, deleted] {
            #expect(try n1.roundTrip(.put(key: Array(written.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        }
        try Self.checkpointPastWhatIsOnDisk(cluster, owner: "n1", socket: n1, alreadyOnDisk: 2)
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForDown("n1", cluster: cluster)
        #expect(
            try cluster.node("n2").connect().roundTrip(.put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0))
                .status == .ok
        )

        try cluster.start("n1")
        let owner = try cluster.node("n1").connect()
        #expect(try cluster.stats("n1")["holding"] as? Bool == true, "the owner holds after its restart")
        // While it holds: a write and a delete of its keys, through the owner itself and through a peer.
        #expect(try owner.roundTrip(.put(key: Array(key.utf8), value: Array("v3".utf8), ttl: 0)).status == .ok)
        let deletion = try cluster.node("n3").connect().roundTrip(.delete(key: Array(deleted.utf8))).status
        #expect(deletion == .ok || deletion == .notFound, "\(deletion)")
        #expect(try NodeForwardingTests.get(key, from: owner, flags: .forwarded).status == .notFound, "held: a miss")
        #expect(try Self.waitUntilServing("n1", cluster: cluster), "the owner's hold ended")
        for id in ["n1", "n2", "n3"] {
            let connection = try cluster.node(id).connect()
            #expect(try NodeForwardingTests.get(key, from: connection).body == Array("v3".utf8), "\(id)")
            #expect(try NodeForwardingTests.get(deleted, from: connection).status == .notFound, "\(id)")
        }
        let direct = try NodeForwardingTests.get(key, from: try cluster.node("n1").connect(), flags: .forwarded)
        #expect(direct.body == Array("v3".utf8), "the owner holds the write itself")
    }

    /// A stand-in hands back the values it took for a returned owner (`Protocol/CLUSTER.md`, "Handing back
    /// values"): the owner is warm for them once its hold ends, with the TTL they had left, and a key the
    /// stand-in deleted stays deleted (not brought back from the owner's disk).
    @Test func aStandInHandsBackTheValuesItTookWithTheirTtl() throws {
        let cluster = try Cluster(extraArguments: Self.timings, disk: true)
        let kept = cluster.key(ownedBy: "n1", prefix: "kept")
        let expiring = cluster.key(ownedBy: "n1", prefix: "expiring")
        let deleted = cluster.key(ownedBy: "n1", prefix: "deleted")
        let n1 = try cluster.node("n1").connect()
        #expect(try n1.roundTrip(.put(key: Array(deleted.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        try Self.checkpointPastWhatIsOnDisk(cluster, owner: "n1", socket: n1, alreadyOnDisk: 1)
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForDown("n1", cluster: cluster)
        // Through n3, each to its stand-in.
        let n3 = try cluster.node("n3").connect()
        #expect(try n3.roundTrip(.put(key: Array(kept.utf8), value: Array("v2".utf8), ttl: 0)).status == .ok)
        #expect(try n3.roundTrip(.put(key: Array(expiring.utf8), value: Array("t2".utf8), ttl: 6)).status == .ok)
        // The stand-in never had it: NOT_FOUND, but the delete is recorded for the owner all the same.
        #expect(try n3.roundTrip(.delete(key: Array(deleted.utf8))).status == .notFound)
        let written = Date()

        try cluster.start("n1")
        // Once the owner serves again (its hold over), the values are there, from the owner.
        #expect(try Self.waitUntilServing("n1", cluster: cluster), "the owner's hold ended")
        let served = try NodeForwardingTests.get(kept, from: try cluster.node("n1").connect())
        #expect(served.body == Array("v2".utf8), "the handed-back value")
        let direct = try NodeForwardingTests.get(kept, from: try cluster.node("n1").connect(), flags: .forwarded)
        #expect(direct.body == Array("v2".utf8), "the owner holds it itself")
        #expect(try NodeForwardingTests.get(expiring, from: n3).body == Array("t2".utf8))
        #expect(try NodeForwardingTests.get(deleted, from: n3).status == .notFound, "a deleted key stays deleted")
        // The TTL went with it: gone 6 s after it was written.
        Thread.sleep(forTimeInterval: max(0, 6.5 - Date().timeIntervalSince(written)))
        #expect(try NodeForwardingTests.get(expiring, from: n3).status == .notFound, "expired with the TTL it had")
        #expect(try NodeForwardingTests.get(kept, from: n3).body == Array("v2".utf8))
    }

    /// A value the stand-in keeps only in its disk tier (evicted from memory) is handed back too, read from
    /// that tier: the owner is warm for it once its hold ends.
    @Test func aStandInHandsBackAValueItKeepsOnlyOnDisk() throws {
        let cluster = try Cluster(extraArguments: Self.timings + ["--memory-limit", "2MiB"], disk: true)
        let key = Self.keyStoodInByN2(cluster)
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForDown("n1", cluster: cluster)
        let n2 = try cluster.node("n2").connect()
        #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0)).status == .ok)
        // 4 MiB of n2's own keys through its 2 MiB memory tier: the key, the least recently used, leaves memory.
        let filler = [UInt8](repeating: 7, count: 64 << 10)
        for index in 0..<64 {
            let own = cluster.key(ownedBy: "n2", prefix: "fill\(index)-")
            #expect(try n2.roundTrip(.put(key: Array(own.utf8), value: filler, ttl: 0)).status == .ok)
        }
        #expect((try cluster.stats("n2")["evictions"] as? Int ?? 0) > 0, "n2's memory tier evicted")

        try cluster.start("n1")
        #expect(try Self.waitUntilServing("n1", cluster: cluster), "the owner's hold ended")
        let direct = try NodeForwardingTests.get(key, from: try cluster.node("n1").connect(), flags: .forwarded)
        #expect(direct.body == Array("v2".utf8), "the owner holds the value handed back from n2's disk tier")
    }

    /// The owner's side of a hand-back: while it holds, the first word on a key stores the value; a second
    /// (another stand-in may hold another version) deletes it, and so does a hand-back after the hold.
    @Test func anOwnerStoresOnlyTheFirstHandBackOfAKeyInItsHold() throws {
        let cluster = try Cluster(extraArguments: Self.timings + ["--hold-period", "2"], disk: true)
        let first = Array(cluster.key(ownedBy: "n1", prefix: "first").utf8)
        let twice = Array(cluster.key(ownedBy: "n1", prefix: "twice").utf8)
        let late = Array(cluster.key(ownedBy: "n1", prefix: "late").utf8)
        let n1 = try cluster.node("n1").connect()
        #expect(try n1.roundTrip(.put(key: late, value: Array("v1".utf8), ttl: 0)).status == .ok)
        // Restarted on its disk: it holds from its start.
        #expect(cluster.node("n1").stop(signal: SIGTERM, timeout: 5) == 0)
        try cluster.start("n1")
        let owner = try cluster.node("n1").connect()
        #expect(try cluster.stats("n1")["holding"] as? Bool == true)
        func handBack(_ key: [UInt8], _ value: String) throws -> CachetStatus {
            try owner.send(
                CachetCommand.put(key: key, value: Array(value.utf8), ttl: 0).encoded(
                    id: 7,
                    flags: [.forwarded, .invalidation]
                )
            )
            return try owner.readResponse().status
        }
        #expect(try handBack(first, "a") == .ok)
        #expect(try handBack(twice, "b") == .ok)
        #expect(try handBack(twice, "c") == .ok)
        #expect(try Self.waitUntilServing("n1", cluster: cluster), "the hold ended")
        #expect(try handBack(late, "v9") == .ok)
        #expect(
            try NodeForwardingTests.get(String(decoding: first, as: UTF8.self), from: owner).body == Array("a".utf8)
        )
        #expect(try NodeForwardingTests.get(String(decoding: twice, as: UTF8.self), from: owner).status == .notFound)
        #expect(try NodeForwardingTests.get(String(decoding: late, as: UTF8.self), from: owner).status == .notFound)
    }

    @Test func anOwnerStoppedAndResumedNeverServesTheOlderValue() throws {
        let cluster = try Cluster(extraArguments: Self.timings)
        let key = cluster.key(ownedBy: "n1")
        let n2 = try cluster.node("n2").connect()
        #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        let pid = cluster.node("n1").process.processIdentifier
        #expect(freeze(pid), "n1 stopped")
        defer { kill(pid, SIGCONT) }
        try Self.waitForDown("n1", cluster: cluster)

        // n1 is down by timeouts: n2 stands in once n3 confirms it (its next probe tick); until then the write
        // goes to n1 and times out.
        let put = try NodeForwardingTests.writeOnceStoodIn(
            .put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0),
            on: n2
        )
        #expect(put.status == .ok, "\(put.status): \(String(decoding: put.body, as: UTF8.self))")
        // While the owner is stopped, the stand-in serves v2 (asked before the owner resumes: once it has,
        // the stand-in may stop serving the key before any GET of the watch below reaches it).
        #expect(try NodeForwardingTests.get(key, from: n2).body == Array("v2".utf8), "the stand-in served v2")
        kill(pid, SIGCONT)
        // Its memory still holds v1: it holds (a stall) until the stand-in has told it.
        let seen = try Self.watch(key, cluster: cluster, owner: "n1", seconds: 3)
        #expect(!seen.contains(Array("v1".utf8)), "v1 served after the owner resumed")
        // The owner still had v1 in memory, so the stand-in's hand-back of v2 deleted the key there (a value
        // in memory may be newer than what the stand-in read): a miss through every node, or v2 where a try of
        // the write that reached the stopped owner was applied once it resumed (it holds, and takes it).
        for id in ["n1", "n2", "n3"] {
            let reply = try NodeForwardingTests.get(key, from: try cluster.node(id).connect())
            #expect(reply.status == .notFound || reply.body == Array("v2".utf8), "\(id): \(reply.status)")
        }
    }

    /// A key owned by n1 whose stand-in is n2 (its preference list is n1, n2, n3).
    static func keyStoodInByN2(_ cluster: Cluster) -> String {
        (0...).lazy.map { "s\($0)" }.first {
            cluster.membership.preferenceList(for: Array($0.utf8), count: 3).map(\.id) == ["n1", "n2", "n3"]
        }!
    }

    /// The stand-in log's file has a budget, which `--disk-limit` counts (`Protocol/DISK-FORMAT.md`, "Space
    /// accounting"): past it, the owner's log overflows instead of growing, and the owner gets a CLEAR on its
    /// return (a key it held from before, never overwritten, is gone).
    @Test func aStandInLogAtItsBudgetOverflowsAndTheOwnerIsCleared() throws {
        let cluster = try Cluster(extraArguments: Self.timings + ["--hold-period", "1"], disk: true)
        let n1 = try cluster.node("n1").connect()
        let control = Array(cluster.key(ownedBy: "n1", prefix: "control").utf8)
        #expect(try n1.roundTrip(.put(key: control, value: Array("v1".utf8), ttl: 0)).status == .ok)
        #expect(cluster.node("n1").stop(signal: SIGTERM, timeout: 5) == 0)
        try Self.waitForDown("n1", cluster: cluster)
        // Keys of 4,000 bytes that n2 stands in for: 1,100 records take more than the 4 MiB budget.
        let padding = String(repeating: "x", count: 3990)
        let keys = (0...).lazy.map { "\($0)-\(padding)" }.filter {
            cluster.membership.preferenceList(for: Array($0.utf8), count: 3).map(\.id) == ["n1", "n2", "n3"]
        }.prefix(1100)
        let n2 = try cluster.node("n2").connect()
        for key in keys {
            #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: [1], ttl: 0)).status == .ok)
        }
        let file = cluster.directory.appending("data-n2/standin-log")
        let size = (try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? -1
        #expect(size > 4_000_000 && size <= 4 << 20, "the stand-in log file holds \(size) bytes")

        try cluster.start("n1")
        // n2 delivers a CLEAR: the control key from before is gone from n1, once it serves again.
        #expect(try Self.waitUntilServing("n1", cluster: cluster), "n1's hold ended")
        let deadline = Date().addingTimeInterval(10)
        var cleared = false
        while !cleared && Date() < deadline {
            cleared =
                try NodeForwardingTests.get(String(decoding: control, as: UTF8.self), from: Self.n1Reconnected(cluster))
                .status == .notFound
            if !cleared { Thread.sleep(forTimeInterval: 0.1) }
        }
        #expect(cleared, "the owner was cleared")
    }

    static func n1Reconnected(_ cluster: Cluster) throws -> TestSocket { try cluster.node("n1").connect() }

    /// The stand-in's log survives its own crash (`Protocol/CLUSTER.md`, "The stand-in's log"): v1 on the
    /// owner's disk, the owner killed, v2 taken by the stand-in, the stand-in killed before it could tell
    /// the owner and restarted, the owner restarted with v1 on its disk — no GET returns v1, during the
    /// owner's hold or after it.
    @Test func aStandInKilledBeforeItDeliveredStillTellsTheOwnerAfterItsRestart() throws {
        let cluster = try Cluster(extraArguments: Self.timings + ["--hold-period", "2"], disk: true)
        let key = Self.keyStoodInByN2(cluster)
        let n1 = try cluster.node("n1").connect()
        #expect(try n1.roundTrip(.put(key: Array(key.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        try Self.checkpointPastWhatIsOnDisk(cluster, owner: "n1", socket: n1, alreadyOnDisk: 1)
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForDown("n1", cluster: cluster)

        // Through n3, which sends it to the stand-in n2.
        let n3 = try cluster.node("n3").connect()
        #expect(try n3.roundTrip(.put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0)).status == .ok)
        #expect(
            try NodeForwardingTests.get(key, from: try cluster.node("n2").connect(), flags: .forwarded).body
                == Array("v2".utf8)
        )
        let file = cluster.directory.appending("data-n2/standin-log")
        #expect(((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0) > 16)

        _ = cluster.node("n2").stop(signal: SIGKILL)
        try cluster.start("n2")
        #expect(cluster.node("n2").log.contains("stand-in log read back"), "\(cluster.node("n2").log)")
        try cluster.start("n1")
        // Past the owner's 2 s hold: it serves its disk from then on.
        let seen = try Self.watch(key, cluster: cluster, owner: "n1", seconds: 4)
        #expect(!seen.contains(Array("v1".utf8)), "v1 served after the stand-in's and the owner's restarts")
        for id in ["n1", "n2", "n3"] {
            #expect(try NodeForwardingTests.get(key, from: try cluster.node(id).connect()).status == .notFound, "\(id)")
        }
        // Delivered: the file holds nothing but its header.
        #expect((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) == 16)
    }

    /// A stand-in whose log file cannot be written refuses the writes it would take for a member that is
    /// down (SERVER_ERROR, saying why) rather than acknowledge what a crash could lose; its own keys are
    /// served as always. The unreadable file also means it cannot know whom it owed what: every member gets
    /// a CLEAR.
    @Test func aStandInThatCannotWriteItsLogFileRefusesWritesForADownOwner() throws {
        let cluster = try Cluster(extraArguments: Self.timings, disk: true)
        let key = Self.keyStoodInByN2(cluster)
        let n3Key = cluster.key(ownedBy: "n3")
        #expect(
            try cluster.node("n3").connect().roundTrip(.put(key: Array(n3Key.utf8), value: [3], ttl: 0)).status == .ok
        )
        let n1Key = cluster.key(ownedBy: "n1")
        let n1 = try cluster.node("n1").connect()
        #expect(try n1.roundTrip(.put(key: Array(n1Key.utf8), value: [1], ttl: 0)).status == .ok)
        _ = cluster.node("n2").stop(signal: SIGKILL)
        let file = cluster.directory.appending("data-n2/standin-log")
        unlink(file)
        mkdir(file, 0o755)
        try cluster.start("n2")
        #expect(cluster.node("n2").log.contains("every member gets a CLEAR"))
        // n3 was told to drop everything (it answers n2's first probe).
        let deadline = Date().addingTimeInterval(5)
        var status: CachetStatus = .ok
        repeat {
            status = try NodeForwardingTests.get(n3Key, from: try cluster.node("n3").connect(), flags: .forwarded)
                .status
            if status == .notFound { break }
            Thread.sleep(forTimeInterval: 0.05)
        } while Date() < deadline
        #expect(status == .notFound, "n3 cleared")
        // And n2 has n1's answer to its CLEAR. Until then the CLEAR it still owes n1 covers any write of
        // n1's keys: such a write adds nothing to the file and is taken, not refused. n2 sends GETs of n1's
        // keys to n1 only once it owes n1 nothing (until then they miss), so a GET through n2 that returns
        // what n1 holds shows it. n1's key is written again after the CLEAR removed it (a CLEAR whose answer
        // came late is sent again).
        let delivered = Date().addingTimeInterval(10)
        var (n1Cleared, servedThroughN2) = (false, false)
        repeat {
            let reply = try NodeForwardingTests.get(n1Key, from: try cluster.node("n2").connect())
            servedThroughN2 = reply.status == .ok && reply.body == [1]
            if servedThroughN2 { break }
            if try NodeForwardingTests.get(n1Key, from: n1, flags: .forwarded).status == .notFound {
                n1Cleared = true
                #expect(try n1.roundTrip(.put(key: Array(n1Key.utf8), value: [1], ttl: 0)).status == .ok)
            }
            Thread.sleep(forTimeInterval: 0.05)
        } while Date() < delivered
        #expect(n1Cleared, "n1 cleared")
        #expect(servedThroughN2, "n2 sends n1's keys to n1: it owes n1 nothing")

        // Once the hold of n2's restart is over: while it holds, it leaves the keys it would stand in for,
        // and its own, to the next member.
        let served = Date().addingTimeInterval(10)
        while try cluster.stats("n2")["holding"] as? Bool != false && Date() < served {
            Thread.sleep(forTimeInterval: 0.05)
        }
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForDown("n1", cluster: cluster)
        let n2 = try cluster.node("n2").connect()
        let refused = try n2.roundTrip(.put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0))
        #expect(refused.status == .serverError)
        #expect(String(decoding: refused.body, as: UTF8.self).contains("stand-in log file"))
        #expect(try NodeForwardingTests.get(key, from: n2).status == .notFound)
        let own = cluster.key(ownedBy: "n2")
        #expect(try n2.roundTrip(.put(key: Array(own.utf8), value: [2], ttl: 0)).status == .ok)
        #expect(try NodeForwardingTests.get(own, from: n2).body == [2])
    }

    @Test func aDeliveryLongerThanTheHoldIsCountedAsOverdue() throws {
        // A hold of 1 ms: no stand-in can deliver within it, so each delivery is overdue, logged and counted.
        let cluster = try Cluster(extraArguments: Self.timings + ["--hold-period", "0.001"])
        let key = cluster.key(ownedBy: "n1")
        let n2 = try cluster.node("n2").connect()
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForDown("n1", cluster: cluster)
        #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: [2], ttl: 0)).status == .ok)
        try cluster.start("n1")
        let deadline = Date().addingTimeInterval(10)
        var overdue = 0
        repeat {
            overdue = ["n2", "n3"].map { (try? cluster.stats($0)["stand_in_delivery_overdue"] as? Int ?? 0) ?? 0 }
                .reduce(0, +)
            if overdue > 0 { break }
            Thread.sleep(forTimeInterval: 0.05)
        } while Date() < deadline
        #expect(overdue == 1)
        #expect(["n2", "n3"].contains { cluster.node($0).log.contains("overdue") })
    }

    // MARK: The hold lasts while invalidations arrive

    /// A hold of 1 s, a stall threshold of 0.5 s (the forward deadline), a quiet period of 0.5 + 0.1 s,
    /// at most 4 s; never ended early by the peers (the tests play the stand-in themselves, and the real
    /// peers owe the owner nothing).
    static let holdTimings = [
        "--probe-interval", "0.1", "--forward-timeout", "0.5", "--hold-period", "1", "--hold-full-period",
    ]

    /// Monotonic seconds, on the clock the node's hold uses.
    static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// Sends what a stand-in delivers (a DEL of `invalidated` with `forwarded` and `invalidation` set)
    /// and, in the same write, a GET of `key` with `forwarded` set (what the owner holds); returns the GET's
    /// reply and when it was read.
    static func invalidateThenGet(_ invalidated: String, _ key: String, on socket: TestSocket) throws -> (
        CachetResponse, Double
    ) {
        var batch = CachetCommand.delete(key: Array(invalidated.utf8)).encoded(
            id: 1,
            flags: [.forwarded, .invalidation]
        )
        CachetCommand.get(key: Array(key.utf8)).encode(id: 2, flags: .forwarded, to: &batch)
        try socket.send(batch)
        _ = try socket.readResponse()
        let reply = try socket.readResponse()
        return (reply, now())
    }

    /// Starts a cluster, puts `key` on its owner n1, stops n1 for longer than the stall threshold and
    /// resumes it: n1 holds from then. Returns when it was resumed (monotonic seconds).
    static func stallOwner(_ cluster: Cluster, key: String, socket: TestSocket) throws -> Double {
        #expect(try socket.roundTrip(.put(key: Array(key.utf8), value: [1], ttl: 0)).status == .ok)
        #expect(try NodeForwardingTests.get(key, from: socket, flags: .forwarded).body == [1], "no hold before")
        let pid = cluster.node("n1").process.processIdentifier
        #expect(freeze(pid), "n1 stopped")
        Thread.sleep(forTimeInterval: 1)
        let resumed = now()
        kill(pid, SIGCONT)
        return resumed
    }

    @Test func invalidationsKeepAReturnedOwnerHoldingAndItServesAQuietPeriodAfterTheLast() throws {
        let cluster = try Cluster(extraArguments: Self.holdTimings)
        let key = cluster.key(ownedBy: "n1")
        let invalidated = cluster.key(ownedBy: "n1", prefix: "gone")
        let n1 = try cluster.node("n1").connect()
        let resumed = try Self.stallOwner(cluster, key: key, socket: n1)
        defer { kill(cluster.node("n1").process.processIdentifier, SIGCONT) }

        // Invalidations every 0.15 s for 2.5 s, well past the hold period: it holds all the while.
        var served: [Double] = []
        var lastInvalidation = resumed
        repeat {
            lastInvalidation = Self.now()
            let (reply, at) = try Self.invalidateThenGet(invalidated, key, on: n1)
            if reply.status == .ok { served.append(at - resumed) }
            Thread.sleep(forTimeInterval: 0.15)
        } while Self.now() < resumed + 2.5
        #expect(served.isEmpty, "served its key while invalidations arrived, at \(served) s after it resumed")
        #expect(try cluster.stats("n1")["holding"] as? Bool == true)

        // Quiet: it serves its key again once the quiet period (0.6 s) after the last one has passed.
        var firstServed: Double?
        repeat {
            let reply = try NodeForwardingTests.get(key, from: n1, flags: .forwarded)
            if reply.status == .ok {
                #expect(reply.body == [1])
                firstServed = Self.now()
                break
            }
            Thread.sleep(forTimeInterval: 0.05)
        } while Self.now() < lastInvalidation + 4
        let quiet = try #require(firstServed) - lastInvalidation
        #expect(quiet >= 0.6 && quiet < 1.8, "served again \(quiet) s after the last invalidation")
        let stats = try cluster.stats("n1")
        #expect((stats["hold_extensions"] as? Int ?? 0) > 0 && stats["holding"] as? Bool == false, "\(stats)")
    }

    @Test func aStreamOfInvalidationsHoldsNoLongerThanFourHoldPeriods() throws {
        let cluster = try Cluster(extraArguments: Self.holdTimings)
        let key = cluster.key(ownedBy: "n1")
        let invalidated = cluster.key(ownedBy: "n1", prefix: "gone")
        let n1 = try cluster.node("n1").connect()
        let resumed = try Self.stallOwner(cluster, key: key, socket: n1)
        defer { kill(cluster.node("n1").process.processIdentifier, SIGCONT) }

        var firstServed: Double?
        repeat {
            let (reply, at) = try Self.invalidateThenGet(invalidated, key, on: n1)
            if reply.status == .ok {
                firstServed = at
                break
            }
            Thread.sleep(forTimeInterval: 0.15)
        } while Self.now() < resumed + 10
        // The hold started when n1 noticed the stall, after it resumed (later still if it then took itself
        // for cut off and regained contact); it ends 4 × 1 s after its start however many invalidations come.
        let held = try #require(firstServed, "still holding 10 s after it resumed") - resumed
        #expect(held >= 4 && held < 6.5, "served again \(held) s after it resumed")
    }

    /// A member stopped with SIGTERM answers nothing more from that moment, on connections opened before
    /// too (`Protocol/CLUSTER.md`, "A member that stops"). While it drained, it used to take writes of its
    /// keys on its open connections for seconds, while its peers, which could no longer connect to it, gave
    /// the same keys to a stand-in: two members acknowledged writes of one key, and a GET through a peer
    /// returned the stand-in's older value.
    @Test func aMemberStoppedWithSigtermTakesNoMoreWritesOnItsOpenConnections() throws {
        let cluster = try Cluster(extraArguments: Self.timings)
        let key = Array(cluster.key(ownedBy: "n1").utf8)
        let owner = try cluster.node("n1").connect()
        owner.setTimeout(1)
        #expect(try owner.roundTrip(.put(key: key, value: Array("v0".utf8), ttl: 0)).status == .ok)
        let signalled = Date()
        kill(cluster.node("n1").process.processIdentifier, SIGTERM)
        // The connection is never idle: a write every 10 ms until the node closes it, for at most 3 s.
        var late: [Double] = []
        var round = 0
        while Date().timeIntervalSince(signalled) < 3 {
            round += 1
            let reply: CachetResponse
            do {
                reply = try owner.roundTrip(.put(key: key, value: Array("v\(round)".utf8), ttl: 0))
            } catch {
                break
            }
            let after = Date().timeIntervalSince(signalled)
            // The signal takes a moment to reach the node's loops; a write answered later was taken while
            // the member was leaving.
            if reply.status == .ok && after > 0.2 { late.append(after) }
            Thread.sleep(forTimeInterval: 0.01)
        }
        #expect(
            late.isEmpty,
            "\(late.count) writes acknowledged after the SIGTERM, the last \(late.last ?? 0) s after it"
        )
        #expect(cluster.node("n1").stop(timeout: 5) == 0)
        #expect(Date().timeIntervalSince(signalled) < 3, "the member took more than 3 s to stop")
    }

    /// A member sent SIGTERM tells its peers it is leaving before it closes: each marks it down at once (no
    /// probe needed), logs why, and serves its keys as
    /// the stand-in would; the member logs how many peers it told, and exits promptly.
    @Test func aMemberStoppedWithSigtermTellsItsPeersItIsLeaving() throws {
        // Probes every 2 s: the notice marks n1 down before n1 has even closed its connections, and the log says
        // it was the notice.
        let cluster = try Cluster(
            extraArguments: ["--probe-interval", "2", "--forward-timeout", "0.5", "--hold-period", "1"]
        )
        for id in ["n2", "n3"] { #expect(try cluster.stateOf("n1", on: id) == "up") }
        let key = Array(cluster.key(ownedBy: "n1").utf8)
        let n2 = try cluster.node("n2").connect()
        #expect(try n2.roundTrip(.put(key: key, value: Array("v1".utf8), ttl: 0)).status == .ok)
        let signalled = Date()
        #expect(cluster.node("n1").stop(signal: SIGTERM, timeout: 5) == 0)
        let stopped = Date().timeIntervalSince(signalled)
        #expect(stopped < 2, "n1 took \(stopped) s to stop")
        for id in ["n2", "n3"] {
            #expect(try cluster.stateOf("n1", on: id) == "down", "\(id) marked n1 down on its notice")
            #expect(cluster.node(id).log.contains("a cluster member is leaving the cluster"))
            #expect(cluster.node(id).log.contains("n1 is leaving the cluster"))
        }
        #expect(cluster.node("n1").log.contains("cluster.peers_told=2/2"), "\(cluster.node("n1").log)")
        // The key's stand-in takes writes of it, and serves what it took.
        #expect(try n2.roundTrip(.put(key: key, value: Array("v2".utf8), ttl: 0)).status == .ok)
        #expect(try n2.roundTrip(.get(key: key)).body == Array("v2".utf8))
    }

    static func waitForState(_ id: String, _ state: String, on members: [String], cluster: Cluster) throws {
        for other in members where other != id {
            #expect(
                try cluster.waitForState(of: id, on: other, toBe: state, within: 5) == state,
                "\(id) \(state) on \(other)"
            )
        }
    }

    /// A second stand-in keeps an older copy (`Protocol/CLUSTER.md`, "A stand-in that is not the first any
    /// more"): the owner n1 and its first stand-in n2 are down, n3 takes v1; n2 comes back and takes v2 in
    /// its place; n2 goes away again and n3 stands in once more. No GET may return v1: the write after it
    /// went to n2, which n3 never saw.
    @Test func aSecondStandInNeverServesTheCopyItHeldBeforeTheFirstReturned() throws {
        let cluster = try Cluster(members: 5, extraArguments: Self.timings, disk: true)
        let key = (0...).lazy.map { "c\($0)" }.first {
            cluster.membership.preferenceList(for: Array($0.utf8), count: 3).map(\.id) == ["n1", "n2", "n3"]
        }!
        let others = ["n3", "n4", "n5"]
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForState("n1", "down", on: others, cluster: cluster)
        _ = cluster.node("n2").stop(signal: SIGKILL)
        try Self.waitForState("n2", "down", on: others, cluster: cluster)
        let n4 = try cluster.node("n4").connect()
        #expect(try n4.roundTrip(.put(key: Array(key.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        #expect(try NodeForwardingTests.get(key, from: try cluster.node("n5").connect()).body == Array("v1".utf8))

        // n2 comes back; once everyone sees it and its hold is over, it is the stand-in again and takes v2.
        try cluster.start("n2")
        try Self.waitForState("n2", "up", on: others, cluster: cluster)
        let settled = Date().addingTimeInterval(10)
        while try cluster.stats("n2")["holding"] as? Bool != false && Date() < settled {
            Thread.sleep(forTimeInterval: 0.05)
        }
        var written = false
        let writing = Date().addingTimeInterval(5)
        repeat {
            written = try n4.roundTrip(.put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0)).status == .ok
            if !written { Thread.sleep(forTimeInterval: 0.05) }
        } while !written && Date() < writing
        #expect(written, "v2 acknowledged")

        // n2 goes away again: n3 stands in once more, and must not serve v1.
        _ = cluster.node("n2").stop(signal: SIGKILL)
        try Self.waitForState("n2", "down", on: others, cluster: cluster)
        let sockets = try others.map { try cluster.node($0).connect() }
        let watching = Date().addingTimeInterval(1.5)
        var seen: [String] = []
        repeat {
            for socket in sockets {
                let reply = try NodeForwardingTests.get(key, from: socket)
                if reply.status == .ok { seen.append(String(decoding: reply.body, as: UTF8.self)) }
            }
            Thread.sleep(forTimeInterval: 0.02)
        } while Date() < watching
        #expect(!seen.contains("v1"), "the second stand-in served the copy it held before the first returned")
    }

    /// The owner is killed right after its first stand-in returned (`Protocol/CLUSTER.md`, "The owner's
    /// hold"): while the members disagree on whether that stand-in is back, one client writes and reads the
    /// key through every node in turn. No GET may return a value that a later acknowledged write replaced.
    @Test func anOwnerKilledRightAfterItsStandInReturnedLeavesNoStaleRead() throws {
        let cluster = try Cluster(members: 5, extraArguments: Self.timings, disk: true)
        let key = Array(
            (0...).lazy.map { "r\($0)" }.first {
                cluster.membership.preferenceList(for: Array($0.utf8), count: 3).map(\.id) == ["n1", "n2", "n3"]
            }!.utf8
        )
        let members = ["n1", "n2", "n3", "n4", "n5"]
        #expect(
            try cluster.node("n1").connect().roundTrip(.put(key: key, value: Array("v0".utf8), ttl: 0)).status == .ok
        )
        _ = cluster.node("n2").stop(signal: SIGKILL)
        try Self.waitForState("n2", "down", on: ["n1", "n3", "n4", "n5"], cluster: cluster)
        // Long enough down that the others probe it at their longest backoff (0.5 s): they see it back at
        // different times, and the owner dies in that window.
        Thread.sleep(forTimeInterval: 2)
        try cluster.start("n2")
        Thread.sleep(forTimeInterval: 0.05)
        _ = cluster.node("n1").stop(signal: SIGKILL)

        // Sequential writes and reads through n2 to n5 for 3 s: a read is stale when it returns a value
        // whose write was followed by a write acknowledged before the read.
        var sockets: [String: TestSocket] = [:]
        for id in members.dropFirst() { sockets[id] = try cluster.node(id).connect() }
        var acknowledgedAfter: [String: Bool] = [:]  // value -> a later write was acknowledged
        var written: [String] = []
        var stale: [String] = []
        var round = 0
        let end = Date().addingTimeInterval(3)
        repeat {
            round += 1
            let through = members[1 + round % 4]
            let value = "w\(round)"
            written.append(value)
            let reply = try sockets[through]!.roundTrip(.put(key: key, value: Array(value.utf8), ttl: 0))
            if reply.status == .ok {
                for earlier in written.dropLast() { acknowledgedAfter[earlier] = true }
                acknowledgedAfter["v0"] = true
            }
            for id in members.dropFirst() {
                let read = try NodeForwardingTests.get(String(decoding: key, as: UTF8.self), from: sockets[id]!)
                guard read.status == .ok else { continue }
                let seen = String(decoding: read.body, as: UTF8.self)
                if acknowledgedAfter[seen] == true { stale.append("\(seen) through \(id) after w\(round)") }
            }
        } while Date() < end
        #expect(stale.isEmpty, "\(stale.count) stale reads, the first: \(stale.prefix(3))")
    }

    /// A stand-in stopped while it stands in (`Protocol/CLUSTER.md`, "A stand-in that may have been away"):
    /// the owner n1 is down, its stand-in n2 takes v1, n2 is stopped and the others give the key to n3,
    /// which takes v2; n2 resumes. No GET may return v1: neither one a returning owner would send n2 while
    /// n2 holds (`forwarded` and `lastHop`), nor one through any node once n2's hold is over and it stands
    /// in again. Fails when the node keeps serving its stand-in copies after a stall.
    @Test func aStandInStoppedWhileItStandsInNeverServesItsCopyAfterwards() throws {
        let cluster = try Cluster(members: 5, extraArguments: Self.timings, disk: true)
        let key = (0...).lazy.map { "z\($0)" }.first {
            cluster.membership.preferenceList(for: Array($0.utf8), count: 3).map(\.id) == ["n1", "n2", "n3"]
        }!
        let others = ["n3", "n4", "n5"]
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForState("n1", "down", on: ["n2"] + others, cluster: cluster)
        let n4 = try cluster.node("n4").connect()
        #expect(try n4.roundTrip(.put(key: Array(key.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        #expect(try NodeForwardingTests.get(key, from: try cluster.node("n2").connect()).body == Array("v1".utf8))

        let pid = cluster.node("n2").process.processIdentifier
        #expect(freeze(pid), "n2 stopped")
        defer { kill(pid, SIGCONT) }
        try Self.waitForState("n2", "down", on: others, cluster: cluster)
        let put = try NodeForwardingTests.writeOnceStoodIn(
            .put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0),
            on: n4
        )
        #expect(put.status == .ok, "\(put.status): \(String(decoding: put.body, as: UTF8.self))")
        kill(pid, SIGCONT)

        // While n2 holds (a stall), then past its hold: a returning owner's GET, and GETs through every node.
        let sockets = try (["n2"] + others).map { try cluster.node($0).connect() }
        var seen: [String] = []
        let watching = Date().addingTimeInterval(4)
        repeat {
            let flags: [CachetRequestFlags] = [[], [.forwarded, .lastHop]]
            for flag in flags {
                let reply = try NodeForwardingTests.get(key, from: sockets[0], flags: flag)
                if reply.status == .ok { seen.append(String(decoding: reply.body, as: UTF8.self)) }
            }
            for socket in sockets.dropFirst() {
                let reply = try NodeForwardingTests.get(key, from: socket)
                if reply.status == .ok { seen.append(String(decoding: reply.body, as: UTF8.self)) }
            }
            Thread.sleep(forTimeInterval: 0.02)
        } while Date() < watching
        let older = seen.filter { $0 == "v1" }.count
        #expect(
            older == 0,
            "\(older) of the \(seen.count) values served were v1, the stand-in's copy from before its stop"
        )
        #expect(try cluster.stats("n2")["holding"] as? Bool == false, "n2's hold is over: it stands in again")
    }
}
