import CachetStore
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Items with memcached's fields (`Protocol/PROTOCOL.md`, "Items: flags, CAS and conditional writes") on
/// real node processes: flags kept and returned, CAS uniques given on demand and checked by
/// compare-and-swap, the conditional, arithmetic and touch modes, from memory and from the disk tier, across
/// a restart.
@Suite("Node: items with flags, CAS and conditional writes", .dedicatedThreads)
struct NodeItemTests {
    static func write(
        _ mode: CachetItemWrite.Mode,
        _ key: String,
        _ data: [UInt8] = [],
        flags: UInt32 = 0,
        cas: UInt64 = 0,
        ttl: UInt32 = 0,
        on socket: TestSocket
    ) throws -> CachetResponse {
        let field = CachetItemWrite.encodeHeader(mode: mode, flags: flags, cas: cas) + data
        try socket.send(CachetCommand.put(key: Array(key.utf8), value: field, ttl: ttl).encoded(id: 3, flags: .item))
        return try socket.readResponse()
    }

    static func delta(_ value: UInt64) -> [UInt8] { withUnsafeBytes(of: value.bigEndian) { Array($0) } }

    /// A GET with the item flag: flags, CAS and value; nil on a miss.
    static func item(_ key: String, on socket: TestSocket) throws -> (flags: UInt32, cas: UInt64, value: [UInt8])? {
        try socket.send(CachetCommand.get(key: Array(key.utf8)).encoded(id: 4, flags: .item))
        let reply = try socket.readResponse()
        guard reply.status == .ok, let (flags, cas, start) = CachetItemWrite.decodeItemReply(reply.body) else {
            return nil
        }
        return (flags, cas, Array(reply.body[start...]))
    }

    static func cas(of reply: CachetResponse) -> UInt64? {
        guard reply.status == .ok, reply.body.count >= 8 else { return nil }
        return reply.body.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self).bigEndian }
    }

    @Test func flagsAndCASAreKeptAndCompareAndSwapChecksThem() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let socket = try node.connect()
        let set = try Self.write(.set, "k", Array("hello".utf8), flags: 0xfeed, on: socket)
        let first = try #require(Self.cas(of: set))
        let read = try #require(try Self.item("k", on: socket))
        #expect(read.flags == 0xfeed && read.cas == first && read.value == Array("hello".utf8))
        // The native GET reads the same value; a native PUT is a new version without flags, given a CAS on demand.
        #expect(try socket.roundTrip(.get(key: Array("k".utf8))).body == Array("hello".utf8))
        #expect(try socket.roundTrip(.put(key: Array("k".utf8), value: Array("plain".utf8), ttl: 0)).status == .ok)
        let plain = try #require(try Self.item("k", on: socket))
        #expect(plain.flags == 0 && plain.cas != first && plain.cas != 0)
        #expect(try Self.item("k", on: socket)?.cas == plain.cas, "given once, then kept")
        // Compare-and-swap: a stale unique is EXISTS, the current one stores, a missing key is NOT_FOUND.
        #expect(try Self.write(.compareAndSwap, "k", [1], cas: first, on: socket).status == .exists)
        let swapped = try Self.write(.compareAndSwap, "k", [2], flags: 7, cas: plain.cas, on: socket)
        #expect(swapped.status == .ok && Self.cas(of: swapped) != plain.cas)
        #expect(try Self.item("k", on: socket)?.value == [2] && (try Self.item("k", on: socket)?.flags) == 7)
        #expect(try Self.write(.compareAndSwap, "absent", [1], cas: 1, on: socket).status == .notFound)
    }

    @Test func conditionalArithmeticAndTouchModes() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let socket = try node.connect()
        #expect(try Self.write(.add, "a", Array("1".utf8), flags: 3, on: socket).status == .ok)
        #expect(try Self.write(.add, "a", Array("2".utf8), on: socket).status == .notStored)
        #expect(try Self.write(.replace, "b", Array("2".utf8), on: socket).status == .notStored)
        #expect(try Self.write(.replace, "a", Array("10".utf8), flags: 4, on: socket).status == .ok)
        #expect(try Self.write(.append, "a", Array("0".utf8), on: socket).status == .ok)
        #expect(try Self.write(.prepend, "a", Array("0".utf8), on: socket).status == .ok)
        #expect(try Self.write(.append, "b", Array("0".utf8), on: socket).status == .notStored)
        let appended = try #require(try Self.item("a", on: socket))
        #expect(appended.value == Array("0100".utf8) && appended.flags == 4, "append and prepend keep the flags")
        // incr and decr: decimal, wrapping at 2^64 up, stopping at 0 down.
        let incr = try Self.write(.increment, "a", Self.delta(5), on: socket)
        #expect(incr.status == .ok && incr.body.count == 16)
        #expect(incr.body.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self).bigEndian } == 105)
        #expect(try Self.item("a", on: socket)?.value == Array("105".utf8))
        #expect(try Self.write(.decrement, "a", Self.delta(1000), on: socket).status == .ok)
        #expect(try Self.item("a", on: socket)?.value == Array("0".utf8))
        #expect(try Self.write(.set, "max", Array("18446744073709551615".utf8), on: socket).status == .ok)
        #expect(try Self.write(.increment, "max", Self.delta(2), on: socket).status == .ok)
        #expect(try Self.item("max", on: socket)?.value == Array("1".utf8), "wrapped at 2^64")
        #expect(try Self.write(.increment, "b", Self.delta(1), on: socket).status == .notFound)
        #expect(try Self.write(.set, "text", Array("abc".utf8), on: socket).status == .ok)
        let notNumber = try Self.write(.increment, "text", Self.delta(1), on: socket)
        #expect(notNumber.status == .badRequest && notNumber.bodyText.contains("non-numeric"))
        #expect(try Self.write(.increment, "text", [1, 2], on: socket).status == .badRequest, "an 8-byte delta")
        // touch and get-and-touch set the TTL and keep the value.
        #expect(try Self.write(.touch, "a", ttl: 100, on: socket).status == .ok)
        try socket.send(CachetCommand.get(key: Array("a".utf8)).encoded(id: 8, flags: .ttl))
        let timed = try socket.readResponse()
        #expect(timed.status == .ok && timed.body.prefix(4) != [0, 0, 0, 0])
        #expect(try Self.write(.touch, "b", ttl: 100, on: socket).status == .notFound)
        let gat = try Self.write(.getAndTouch, "text", ttl: 0, on: socket)
        #expect(gat.status == .ok && Array(gat.body.dropFirst(12)) == Array("abc".utf8))
        // With ttl too, the TTL left follows the flags and CAS unique (100 s, set by the touch above).
        try socket.send(CachetCommand.get(key: Array("a".utf8)).encoded(id: 9, flags: [.item, .ttl]))
        let withTTL = try socket.readResponse()
        let left = withTTL.body.count >= 16 ? withTTL.body[12..<16].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } : 0
        #expect(withTTL.status == .ok && (90...100).contains(left), "\(withTTL)")
        // A mode the node does not have: BAD_REQUEST.
        try socket.send(
            CachetCommand.put(key: Array("a".utf8), value: CachetItemWrite.encodeHeader(mode: .delete) + [0], ttl: 0)
                .encoded(id: 10, flags: .item)
        )
        #expect(try socket.readResponse().status == .badRequest, "delete takes no data")
        // An item PUT with lease: BAD_REQUEST.
        try socket.send(
            CachetCommand.put(key: Array("a".utf8), value: CachetItemWrite.encodeHeader(mode: .set), ttl: 0)
                .encoded(id: 11, flags: [.item, .lease])
        )
        #expect(try socket.readResponse().status == .badRequest)
    }

    @Test func itemsOnTheDiskTierKeepTheirFieldsAndConditionalWritesReadThem() throws {
        let directory = TemporaryDirectory(prefix: "cachet-items")
        defer { directory.remove() }
        let arguments = ["--data-dir", directory.path, "--disk-limit", "64MiB", "--memory-limit", "1MiB"]
        var node = try NodeProcess(arguments: arguments)
        var socket = try node.connect()
        let stored = try Self.write(.set, "kept", Array("42".utf8), flags: 99, on: socket)
        let unique = try #require(Self.cas(of: stored))
        #expect(node.stop() == 0)
        node = try NodeProcess(arguments: arguments)
        socket = try node.connect()
        // Read back from disk after the restart, flags and CAS as stored.
        let read = try #require(try Self.item("kept", on: socket))
        #expect(read.flags == 99 && read.cas == unique && read.value == Array("42".utf8))
        // Pushed out of memory by others, then written conditionally: the disk tier's item is read first.
        #expect(try Self.write(.set, "old", Array("7".utf8), flags: 5, on: socket).status == .ok)
        let filler = [UInt8](repeating: 1, count: 100_000)
        for index in 0..<30 {
            #expect(try socket.roundTrip(.put(key: Array("fill\(index)".utf8), value: filler, ttl: 0)).status == .ok)
        }
        #expect(try Self.write(.add, "old", Array("8".utf8), on: socket).status == .notStored)
        #expect(try Self.write(.increment, "old", Self.delta(1), on: socket).status == .ok)
        let old = try #require(try Self.item("old", on: socket))
        #expect(old.value == Array("8".utf8) && old.flags == 5)
    }
}
