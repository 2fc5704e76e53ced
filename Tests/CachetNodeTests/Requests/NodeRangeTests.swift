import CachetStore
import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// A GET with the `range` flag (`Protocol/PROTOCOL.md`, "GET of a range") on a real node: the reply carries
/// the value's length and just the bytes asked for, at the first and last byte, across the middle, cut at
/// the end, empty, from memory and from the disk tier and through a member that forwards it; a range that
/// starts past the end is RANGE_NOT_SATISFIABLE with the length, and bad bodies are BAD_REQUEST on a
/// connection that stays usable.
@Suite("Node: GET of a range", .dedicatedThreads)
struct NodeRangeTests {
    static let value = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }

    static func rangedGet(_ key: String, _ range: CachetValueRange, on socket: TestSocket) throws -> CachetResponse {
        try socket.send(CachetCommand.rangedGet(key: Array(key.utf8), range: range).encoded(id: 9))
        return try socket.readResponse()
    }

    static let tag = value.withUnsafeBytes { CachetValueTag.of($0) }

    /// The value's length and the bytes of an OK reply, whose tag must be the value's.
    static func split(_ reply: CachetResponse) -> (total: UInt64, bytes: [UInt8])? {
        guard reply.status == .ok, let (total, tag, start) = CachetValueRange.decodeReply(reply.body) else {
            return nil
        }
        let bytes = Array(reply.body[start...])
        #expect(total == 0 || tag == Self.tag, "the reply carries the value's tag")
        return (total, bytes)
    }

    /// Every kind of range against `key` (holding ``value``) through `socket`.
    static func checkRanges(of key: String, on socket: TestSocket) throws {
        let cases: [(CachetValueRange, Range<Int>)] = [
            (CachetValueRange(offset: 0, length: 100), 0..<100),
            (CachetValueRange(offset: 999, length: 1), 999..<1000),
            (CachetValueRange(offset: 500), 500..<1000),
            (CachetValueRange(offset: 990, length: 100), 990..<1000),
            (CachetValueRange(offset: 0), 0..<1000),
            (CachetValueRange(offset: 123, length: 0), 123..<123),
            (CachetValueRange(offset: 1000, length: 5), 1000..<1000),
            (CachetValueRange(offset: 1000), 1000..<1000),
        ]
        for (range, expected) in cases {
            let reply = try rangedGet(key, range, on: socket)
            let (total, bytes) = try #require(split(reply), "\(range): \(reply.status)")
            #expect(reply.id == 9 && reply.opcode == .get)
            #expect(total == 1000 && bytes == Array(value[expected]), "\(range)")
        }
        let past = try rangedGet(key, CachetValueRange(offset: 1001, length: 1), on: socket)
        #expect(past.status == .rangeNotSatisfiable && CachetValueRange.decodeReply(past.body)?.total == 1000)
        #expect(CachetValueRange.decodeReply(past.body)?.tag == Self.tag)
        let far = try rangedGet(key, CachetValueRange(offset: .max, length: .max), on: socket)
        #expect(far.status == .rangeNotSatisfiable)
    }

    @Test func rangesFromMemoryAndFromDiskAndTheirErrors() throws {
        let directory = TemporaryDirectory(prefix: "cachet-range")
        defer { directory.remove() }
        let arguments = ["--data-dir", directory.path, "--disk-limit", "64MiB"]
        var node = try NodeProcess(arguments: arguments)
        var socket = try node.connect()
        #expect(try socket.roundTrip(.put(key: Array("video".utf8), value: Self.value, ttl: 0)).status == .ok)
        #expect(try socket.roundTrip(.put(key: Array("empty".utf8), value: [], ttl: 0)).status == .ok)
        try Self.checkRanges(of: "video", on: socket)
        let empty = try Self.rangedGet("empty", CachetValueRange(offset: 0), on: socket)
        #expect(Self.split(empty).map { $0.total == 0 && $0.bytes.isEmpty } == true)
        let miss = try Self.rangedGet("absent", CachetValueRange(offset: 0, length: 10), on: socket)
        #expect(miss.status == .notFound && miss.body.isEmpty)
        // A plain GET beside it is answered the whole value, as always.
        #expect(try socket.roundTrip(.get(key: Array("video".utf8))).body == Self.value)

        // Bad bodies: the range cut short, and the range with the lease or ttl flag.
        var short = CachetCommand.get(key: Array("video".utf8)).encoded(id: 3, flags: .range)
        short += [0, 0, 0]
        let length = UInt32(short.count - 4)
        short.withUnsafeMutableBytes { $0.storeBytes(of: length.bigEndian, as: UInt32.self) }
        try socket.send(short)
        let cut = try socket.readResponse()
        #expect(cut.status == .badRequest && cut.bodyText.contains("range"), "\(cut.bodyText)")
        let withLease = CachetCommand.rangedGet(key: Array("video".utf8), range: CachetValueRange(offset: 0))
        try socket.send(withLease.encoded(id: 4, flags: .lease))
        #expect(try socket.readResponse().status == .badRequest)
        #expect(try socket.roundTrip(.ping).status == .ok, "the connection stays usable")

        // After a restart the value comes from the disk tier.
        #expect(node.stop() == 0)
        node = try NodeProcess(arguments: arguments)
        socket = try node.connect()
        let fromDisk = try Self.rangedGet("video", CachetValueRange(offset: 900, length: 50), on: socket)
        #expect(Self.split(fromDisk).map { $0.total == 1000 && $0.bytes == Array(Self.value[900..<950]) } == true)
        #expect((try node.stats()["disk_hits"] as? Int ?? 0) >= 1)
        try Self.checkRanges(of: "video", on: socket)
    }

    @Test func aRangeThroughAMemberThatForwardsItIsTheOwnersAndNeverSharesAPlainGetsReply() throws {
        let cluster = try NodeForwardingTests.Cluster()
        let key = cluster.key(ownedBy: "n2")
        let through = try cluster.node("n1").connect()
        #expect(try through.roundTrip(.put(key: Array(key.utf8), value: Self.value, ttl: 0)).status == .ok)
        try Self.checkRanges(of: key, on: through)
        var pipelined: [UInt8] = []
        for id in UInt32(1)...8 {
            let command: CachetCommand =
                id % 2 == 0
                ? .rangedGet(key: Array(key.utf8), range: CachetValueRange(offset: UInt64(id), length: 10))
                : .get(key: Array(key.utf8))
            pipelined += command.encoded(id: id)
        }
        try through.send(pipelined)
        for id in UInt32(1)...8 {
            let reply = try through.readResponse()
            #expect(reply.id == id && reply.status == .ok)
            if id % 2 == 0 {
                #expect(Self.split(reply)?.bytes == Array(Self.value[Int(id)..<Int(id) + 10]), "reply \(id)")
            } else {
                #expect(reply.body == Self.value, "reply \(id)")
            }
        }
    }
}
