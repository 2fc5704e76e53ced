import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Singleflight between real node processes (`Protocol/CLUSTER.md`, "Forwarding"): GETs of one key that a
/// node forwards before an earlier one's request has left it (those its clients sent in one batch) share
/// that request's reply, and a forwarded write detaches the flight. The owner is stopped (SIGSTOP) so that the flight stays in the air until the test
/// resumes it, well within the forward deadline.
@Suite("Node: concurrent forwarded GETs of one key share one request", .dedicatedThreads)
struct NodeSingleflightTests {
    typealias Cluster = NodeForwardingTests.Cluster

    /// A deadline far longer than the owner stays stopped; routable peers probed only every 30 s, so that
    /// no probe times out meanwhile; no hold (a stop shorter than the deadline is no stall anyway).
    static let timings = ["--forward-timeout", "5", "--probe-interval", "30", "--hold-period", "0"]

    /// Polls `id`'s STATS until `field` reaches `value`, for at most `seconds`; returns the last value.
    static func waitFor(_ field: String, of id: String, toReach value: Int, in cluster: Cluster, within seconds: Double)
        throws -> Int
    {
        let deadline = Date().addingTimeInterval(seconds)
        var last = -1
        repeat {
            last = try cluster.stats(id)[field] as? Int ?? -1
            if last >= value { return last }
            Thread.sleep(forTimeInterval: 0.01)
        } while Date() < deadline
        return last
    }

    @Test func fiftyGetsOfOneKeyThroughOneNodeSendOneRequestPerQueue() throws {
        let queues = 2
        let cluster = try Cluster(extraArguments: Self.timings + ["--io-queues", "\(queues)"])
        let key = cluster.key(ownedBy: "n1")
        let value = Array("one value for everyone".utf8)
        #expect(
            try cluster.node("n2").connect().roundTrip(.put(key: Array(key.utf8), value: value, ttl: 0)).status == .ok
        )
        let clients = try (0..<50).map { _ in try cluster.node("n2").connect() }
        let getsBefore = try cluster.stats("n1")["gets"] as? Int ?? -1
        let before = try cluster.stats("n2")
        let forwardsBefore = before["forwards"] as? Int ?? -1
        let collapsedBefore = before["forwards_collapsed"] as? Int ?? -1

        let owner = cluster.node("n1").process.processIdentifier
        defer { kill(owner, SIGCONT) }
        // Stopped for good before the first GET: a thread of n1 still running would answer a flight, and
        // the GETs behind it would start another.
        #expect(freeze(owner), "n1 stopped")
        let stopped = Date()
        // n2 stopped too while the GETs are sent, so that it finds all fifty ready at once when it resumes.
        let forwarder = cluster.node("n2").process.processIdentifier
        defer { kill(forwarder, SIGCONT) }
        #expect(freeze(forwarder), "n2 stopped")
        for (index, client) in clients.enumerated() {
            try client.send(CachetCommand.get(key: Array(key.utf8)).encoded(id: UInt32(1000 + index)))
        }
        kill(forwarder, SIGCONT)
        // Every GET has joined its flight before the owner resumes: n2 deals connections to its I/O queues
        // round robin, so each queue got clients, and read all of them in one batch; the first GET on each
        // started that queue's flight, every other one joined it before its request left the node (a GET
        // read after that starts a flight of its own: that request may have been read before a write
        // through another node was acknowledged).
        let collapsed = try Self.waitFor(
            "forwards_collapsed",
            of: "n2",
            toReach: collapsedBefore + 50 - queues,
            in: cluster,
            within: 3
        )
        #expect(collapsed == collapsedBefore + 50 - queues)
        #expect(try cluster.stats("n2")["forwards"] as? Int == forwardsBefore + 50)
        #expect(Date().timeIntervalSince(stopped) < 4, "resumed within the forward deadline")
        kill(owner, SIGCONT)

        for (index, client) in clients.enumerated() {
            let reply = try client.readResponse()
            #expect(reply.status == .ok && reply.body == value, "client \(index): \(reply)")
            #expect(reply.id == UInt32(1000 + index) && reply.opcode == .get, "client \(index): \(reply)")
        }
        // One request per I/O queue of n2; every other GET shared it.
        let upstream = (try cluster.stats("n1")["gets"] as? Int ?? -1) - getsBefore
        let stats = try cluster.stats("n2")
        #expect(upstream == queues, "the owner served \(upstream) GETs")
        #expect(stats["forwards_collapsed"] as? Int == collapsedBefore + 50 - upstream, "\(stats)")
        #expect(stats["forward_failures"] as? Int == 0)
    }

    @Test func aGetForwardedAfterAPutDoesNotShareTheReplyOfAGetBeforeIt() throws {
        // One I/O queue: the four clients share n2's one peer connection to n1, which answers in order.
        let cluster = try Cluster(extraArguments: Self.timings + ["--io-queues", "1"])
        let key = Array(cluster.key(ownedBy: "n1").utf8)
        let (v1, v2) = (Array("v1".utf8), Array("v2".utf8))
        let n2 = try cluster.node("n2").connect()
        #expect(try n2.roundTrip(.put(key: key, value: v1, ttl: 0)).status == .ok)
        let clients = try (0..<4).map { _ in try cluster.node("n2").connect() }
        let forwardsBefore = try cluster.stats("n2")["forwards"] as? Int ?? -1

        let owner = cluster.node("n1").process.processIdentifier
        defer { kill(owner, SIGCONT) }
        #expect(freeze(owner), "n1 stopped")
        // A GET in the air, then a PUT of v2, then two GETs, each sent once the one before has left n2: each
        // starts a flight of its own. A GET joins only a flight whose request has not left the node yet: one
        // already on its way may have been read before a write, through another node, was acknowledged.
        let requests: [[UInt8]] = [
            CachetCommand.get(key: key).encoded(id: 1),
            CachetCommand.put(key: key, value: v2, ttl: 0).encoded(id: 2),
            CachetCommand.get(key: key).encoded(id: 3),
            CachetCommand.get(key: key).encoded(id: 4),
        ]
        for (index, request) in requests.enumerated() {
            try clients[index].send(request)
            let routed = try Self.waitFor(
                "forwards",
                of: "n2",
                toReach: forwardsBefore + index + 1,
                in: cluster,
                within: 3
            )
            #expect(routed == forwardsBefore + index + 1)
        }
        kill(owner, SIGCONT)

        let replies = try clients.map { try $0.readResponse() }
        // The first GET reached the owner before the PUT did.
        #expect(replies[0].status == .ok && replies[0].body == v1, "\(replies[0])")
        #expect(replies[1].status == .ok && replies[1].opcode == .put)
        #expect(replies[2].status == .ok && replies[2].body == v2, "a GET after the PUT got \(replies[2])")
        #expect(replies[3].status == .ok && replies[3].body == v2, "a GET after the PUT got \(replies[3])")
        #expect(try cluster.stats("n2")["forwards_collapsed"] as? Int == 0)
        // And once the PUT has been answered, of course.
        #expect(try NodeForwardingTests.get(String(decoding: key, as: UTF8.self), from: n2).body == v2)
    }
}
