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
@Suite("Node: failover to a stand-in never serves an older value")
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

    @Test func anOwnerKilledAndRestartedWithItsDiskNeverServesTheOlderValue() throws {
        let cluster = try Cluster(extraArguments: Self.timings, disk: true)
        let key = cluster.key(ownedBy: "n1")
        let n2 = try cluster.node("n2").connect()
        #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        // v1 on the owner's disk, so that its restart brings it back.
        let deadline = Date().addingTimeInterval(5)
        while (try cluster.stats("n1")["disk_items"] as? Int ?? 0) < 1 && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
        }
        _ = cluster.node("n1").stop(signal: SIGKILL)
        try Self.waitForDown("n1", cluster: cluster)

        #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0)).status == .ok)
        #expect(try NodeForwardingTests.get(key, from: try cluster.node("n3").connect()).body == Array("v2".utf8))

        try cluster.start("n1")
        let seen = try Self.watch(key, cluster: cluster, owner: "n1", seconds: 3)
        #expect(!seen.contains(Array("v1".utf8)), "v1 served after the owner's return")
        // The stand-in told the owner (v1 deleted there) and dropped its own copy: a miss everywhere.
        for id in ["n1", "n2", "n3"] {
            #expect(try NodeForwardingTests.get(key, from: try cluster.node(id).connect()).status == .notFound, "\(id)")
        }
    }

    @Test func anOwnerStoppedAndResumedNeverServesTheOlderValue() throws {
        let cluster = try Cluster(extraArguments: Self.timings)
        let key = cluster.key(ownedBy: "n1")
        let n2 = try cluster.node("n2").connect()
        #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        let pid = cluster.node("n1").process.processIdentifier
        kill(pid, SIGSTOP)
        defer { kill(pid, SIGCONT) }
        try Self.waitForDown("n1", cluster: cluster)

        #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: Array("v2".utf8), ttl: 0)).status == .ok)
        kill(pid, SIGCONT)
        // Its memory still holds v1: it holds (a stall) until the stand-in has told it.
        let seen = try Self.watch(key, cluster: cluster, owner: "n1", seconds: 3)
        #expect(!seen.contains(Array("v1".utf8)), "v1 served after the owner resumed")
        #expect(seen.contains(Array("v2".utf8)), "the stand-in served v2 while it stood in")
        for id in ["n1", "n2", "n3"] {
            #expect(try NodeForwardingTests.get(key, from: try cluster.node(id).connect()).status == .notFound, "\(id)")
        }
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
    /// at most 4 s.
    static let holdTimings = ["--probe-interval", "0.1", "--forward-timeout", "0.5", "--hold-period", "1"]

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
        kill(pid, SIGSTOP)
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
}
