import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// Read-through leases on a real node (`Protocol/PROTOCOL.md`, "Leases"): the first miss gets a token,
/// the others are told to wait; a PUT with the token stores while its lease stands, and is refused
/// NOT_STORED after a DEL, a PUT or a CLEAR of the key, or once the lease expired (the stale set of
/// "Scaling Memcache at Facebook").
@Suite("Node: read-through leases", .serialized)
struct NodeLeaseTests {
    static func leaseGet(_ key: String, on socket: TestSocket) throws -> CachetResponse {
        try socket.send(CachetCommand.get(key: Array(key.utf8)).encoded(id: 3, flags: .lease))
        return try socket.readResponse()
    }

    static func leasedPut(_ key: String, _ value: String, token: UInt64, on socket: TestSocket) throws -> CachetStatus {
        try socket.roundTrip(.leasedPut(key: Array(key.utf8), value: Array(value.utf8), ttl: 0, token: token)).status
    }

    @Test(arguments: [false, true])
    func theFirstMissGetsTheLeaseAndTheOthersWait(diskTier: Bool) throws {
        let directory = TemporaryDirectory(prefix: "cachet-lease")
        defer { directory.remove() }
        let node = try NodeProcess(arguments: diskTier ? ["--data-dir", directory.path] : ["--disk-limit", "0"])
        let first = try node.connect()
        let second = try node.connect()
        let miss = try Self.leaseGet("hot", on: first)
        #expect(miss.status == .notFound)
        let lease = try #require(CachetLeaseReply(decoding: miss.body))
        #expect(lease.token != 0)
        let waiting = try #require(CachetLeaseReply(decoding: try Self.leaseGet("hot", on: second).body))
        #expect(waiting.token == 0 && waiting.waitMilliseconds > 0)
        #expect(try Self.leasedPut("hot", "loaded", token: lease.token, on: first) == .ok)
        #expect(try Self.leaseGet("hot", on: second).body == Array("loaded".utf8))
        // The lease ended with its PUT: the token stores nothing more.
        #expect(try Self.leasedPut("hot", "again", token: lease.token, on: first) == .notStored)
        // A plain GET of a missing key is answered as always, with an empty body.
        let plain = try second.roundTrip(.get(key: Array("cold".utf8)))
        #expect(plain.status == .notFound && plain.body.isEmpty)
        #expect((try node.stats()["leases_outstanding"] as? Int) == 0)
    }

    @Test func aWriteBetweenTheLeaseAndItsPutMakesThePutNotStored() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let loader = try node.connect()
        let writer = try node.connect()
        // DEL between: the loaded value may predate it.
        var lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet("k", on: loader).body))
        #expect(try writer.roundTrip(.delete(key: Array("k".utf8))).status == .notFound)
        let refused = try loader.roundTrip(
            .leasedPut(key: Array("k".utf8), value: Array("old".utf8), ttl: 0, token: lease.token)
        )
        #expect(refused.status == .notStored)
        #expect(String(decoding: refused.body, as: UTF8.self).contains("lease"))
        #expect(try loader.roundTrip(.get(key: Array("k".utf8))).status == .notFound)
        // A PUT between: the newer value stays.
        lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet("k", on: loader).body))
        #expect(lease.token != 0)
        #expect(try writer.roundTrip(.put(key: Array("k".utf8), value: Array("new".utf8), ttl: 0)).status == .ok)
        #expect(try Self.leasedPut("k", "old", token: lease.token, on: loader) == .notStored)
        #expect(try loader.roundTrip(.get(key: Array("k".utf8))).body == Array("new".utf8))
        // A CLEAR between.
        lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet("c", on: loader).body))
        #expect(try writer.roundTrip(.clear).status == .ok)
        #expect(try Self.leasedPut("c", "old", token: lease.token, on: loader) == .notStored)
        // A wrong token.
        lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet("w", on: loader).body))
        #expect(try Self.leasedPut("w", "v", token: lease.token &+ 1, on: loader) == .notStored)
    }

    @Test func anExpiredLeaseIsLostAndTheNextMissGetsANewOne() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0", "--lease-time", "0.3"])
        let socket = try node.connect()
        let first = try #require(CachetLeaseReply(decoding: try Self.leaseGet("e", on: socket).body))
        #expect(try #require(CachetLeaseReply(decoding: try Self.leaseGet("e", on: socket).body)).token == 0)
        Thread.sleep(forTimeInterval: 0.5)
        // The holder died (or is slow): the next caller loads.
        let second = try #require(CachetLeaseReply(decoding: try Self.leaseGet("e", on: socket).body))
        #expect(second.token != 0 && second.token != first.token)
        #expect(try Self.leasedPut("e", "late", token: first.token, on: socket) == .notStored)
        #expect(try Self.leasedPut("e", "fresh", token: second.token, on: socket) == .ok)
    }

    @Test func aLeaseIsKeptByTheKeysOwnerWhicheverMemberIsAsked() throws {
        let cluster = try NodeForwardingTests.Cluster()
        let key = (0...).lazy.map { "lease:\($0)" }.first { cluster.membership.owner(of: $0).id == "n2" }!
        let viaFirst = try TestSocket(port: cluster.ports["n1"]!, timeout: 5)
        let viaThird = try TestSocket(port: cluster.ports["n3"]!, timeout: 5)
        let lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet(key, on: viaFirst).body))
        #expect(lease.token != 0)
        #expect(try #require(CachetLeaseReply(decoding: try Self.leaseGet(key, on: viaThird).body)).token == 0)
        #expect(try Self.leasedPut(key, "v", token: lease.token, on: viaThird) == .ok)
        #expect(try viaFirst.roundTrip(.get(key: Array(key.utf8))).body == Array("v".utf8))
    }
}
