import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// A GET with the `ttl` flag (`Protocol/PROTOCOL.md`, "GET with the TTL left") on a real node: its OK reply
/// carries the TTL the entry has left before the value, from memory and from the disk tier, through a
/// member that forwards it, and never shares a plain GET's reply.
@Suite("Node: GET with the TTL left", .dedicatedThreads)
struct NodeTTLReplyTests {
    static func ttlGet(_ key: String, on socket: TestSocket, id: UInt32 = 5) throws -> CachetResponse {
        try socket.send(CachetCommand.get(key: Array(key.utf8)).encoded(id: id, flags: .ttl))
        return try socket.readResponse()
    }

    /// The TTL and the value of an OK reply's body.
    static func split(_ body: [UInt8]) -> (ttl: UInt32, value: [UInt8])? {
        guard body.count >= 4 else { return nil }
        let ttl = UInt32(body[0]) << 24 | UInt32(body[1]) << 16 | UInt32(body[2]) << 8 | UInt32(body[3])
        return (ttl, Array(body[4...]))
    }

    @Test func theReplyCarriesTheTTLLeftFromMemoryAndFromDisk() throws {
        let directory = TemporaryDirectory(prefix: "cachet-ttl-reply")
        defer { directory.remove() }
        let arguments = ["--data-dir", directory.path, "--disk-limit", "64MiB"]
        var node = try NodeProcess(arguments: arguments)
        var socket = try node.connect()
        #expect(
            try socket.roundTrip(.put(key: Array("session".utf8), value: Array("abc".utf8), ttl: 3600)).status == .ok
        )
        #expect(try socket.roundTrip(.put(key: Array("forever".utf8), value: Array("xyz".utf8), ttl: 0)).status == .ok)
        #expect(try socket.roundTrip(.put(key: Array("empty".utf8), value: [], ttl: 60)).status == .ok)

        let session = try Self.ttlGet("session", on: socket)
        #expect(session.status == .ok && session.id == 5 && session.opcode == .get)
        let (ttl, value) = try #require(Self.split(session.body))
        #expect(value == Array("abc".utf8))
        #expect(ttl >= 3598 && ttl <= 3600, "TTL left \(ttl)")
        #expect(Self.split(try Self.ttlGet("forever", on: socket).body).map { $0.ttl } == 0)
        let empty = try #require(Self.split(try Self.ttlGet("empty", on: socket).body))
        #expect(empty.value.isEmpty && empty.ttl > 0)
        // A plain GET of the same key is answered the bare value, as always.
        #expect(try socket.roundTrip(.get(key: Array("session".utf8))).body == Array("abc".utf8))
        // A miss is NOT_FOUND with an empty body.
        let miss = try Self.ttlGet("absent", on: socket)
        #expect(miss.status == .notFound && miss.body.isEmpty)

        // After a restart the values come from the disk tier: the TTL left is read there.
        #expect(node.stop() == 0)
        node = try NodeProcess(arguments: arguments)
        socket = try node.connect()
        let fromDisk = try Self.ttlGet("session", on: socket)
        let (diskTTL, diskValue) = try #require(Self.split(fromDisk.body))
        #expect(fromDisk.status == .ok && diskValue == Array("abc".utf8))
        #expect(diskTTL >= 3590 && diskTTL <= 3600, "TTL left \(diskTTL)")
        #expect((try node.stats()["disk_hits"] as? Int ?? 0) >= 1)
        #expect(Self.split(try Self.ttlGet("forever", on: socket).body).map { $0.ttl } == 0)
    }

    @Test func aTTLGetThroughAMemberThatForwardsItCarriesTheTTLAndPlainGetsBesideItDoNot() throws {
        let cluster = try NodeForwardingTests.Cluster()
        let key = cluster.key(ownedBy: "n2")
        let through = try cluster.node("n1").connect()
        #expect(try through.roundTrip(.put(key: Array(key.utf8), value: Array("v".utf8), ttl: 600)).status == .ok)
        // Plain and TTL GETs of the same key pipelined through the forwarding member: each gets its own
        // reply's shape (a TTL GET never joins a plain GET's forward).
        var pipelined: [UInt8] = []
        for id in UInt32(1)...8 {
            pipelined += CachetCommand.get(key: Array(key.utf8)).encoded(id: id, flags: id % 2 == 0 ? .ttl : [])
        }
        try through.send(pipelined)
        for id in UInt32(1)...8 {
            let reply = try through.readResponse()
            #expect(reply.id == id && reply.status == .ok)
            if id % 2 == 0 {
                let split = try #require(Self.split(reply.body))
                #expect(split.value == Array("v".utf8) && split.ttl > 590 && split.ttl <= 600, "reply \(id)")
            } else {
                #expect(reply.body == Array("v".utf8), "reply \(id)")
            }
        }
    }
}
