import CachetStore
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// WATCH on a real node (`Protocol/PROTOCOL.md`, "WATCH"): events in order with their sequence numbers,
/// none lost while the ring holds them, a resume after a reconnect, a GAP when the ring (or the run) no
/// longer has them, a watcher that does not read held to its send limit while writers and other watchers
/// go on, and a watching connection that answers only UNWATCH and PING.
@Suite("Node: WATCH", .serialized, .dedicatedThreads)
struct NodeWatchTests {
    /// Sends WATCH and reads its OK: the position the stream starts after.
    static func watch(_ socket: TestSocket, _ request: CachetWatchRequest, id: UInt32 = 40) throws
        -> CachetWatchPosition
    {
        let reply = try socket.roundTrip(.watch(request), id: id)
        #expect(reply.status == .ok, "\(String(decoding: reply.body, as: UTF8.self))")
        #expect(reply.opcode == .watch && reply.body.count == 16)
        let run = reply.body[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let sequence = reply.body[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return CachetWatchPosition(run: run, sequence: sequence)
    }

    /// The next EVENT frame.
    static func event(_ socket: TestSocket, id: UInt32 = 40) throws -> CachetEvent {
        let frame = try socket.readResponse()
        #expect(frame.opcode == .event && frame.status == .ok && frame.id == id)
        return try CachetEvent(decoding: frame.body)
    }

    static func put(_ socket: TestSocket, _ key: String, _ value: String, ttl: UInt32 = 0) throws {
        #expect(try socket.roundTrip(.put(key: Array(key.utf8), value: Array(value.utf8), ttl: ttl)).status == .ok)
    }

    @Test func eventsArriveInOrderWithTheirKindsAndOnlyUnderThePrefix() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let writer = try node.connect()
        let withValues = try node.connect()
        let keysOnly = try node.connect()
        let start = try Self.watch(withValues, CachetWatchRequest(prefix: Array("user:".utf8), includesValues: true))
        _ = try Self.watch(keysOnly, CachetWatchRequest(prefix: Array("user:".utf8)))
        try Self.put(writer, "user:1", "a")
        try Self.put(writer, "order:1", "not watched")
        #expect(try writer.roundTrip(.delete(key: Array("user:1".utf8))).status == .ok)
        try Self.put(writer, "user:2", "b", ttl: 60)
        #expect(try writer.roundTrip(.clearPrefixes([Array("user:".utf8)])).status == .ok)
        let events = try (0..<4).map { _ in try Self.event(withValues) }
        #expect(events.map(\.kind) == [.put, .delete, .put, .clear])
        #expect(events.map { String(decoding: $0.key, as: UTF8.self) } == ["user:1", "user:1", "user:2", "user:"])
        #expect(events[0].value == Array("a".utf8) && events[2].value == Array("b".utf8) && events[2].ttl == 60)
        #expect(events.map(\.sequence) == events.map(\.sequence).sorted() && events[0].sequence > start.sequence)
        // The order:1 change was not recorded for them: the sequence numbers follow each other.
        #expect(events[3].sequence - events[0].sequence == 3)
        let bare = try (0..<4).map { _ in try Self.event(keysOnly) }
        #expect(bare.map(\.sequence) == events.map(\.sequence) && bare.allSatisfy { $0.value == nil })
    }

    @Test func entriesThatExpireOrAreEvictedAreAnnounced() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0", "--memory-limit", "1MiB"])
        let writer = try node.connect()
        let watcher = try node.connect()
        _ = try Self.watch(watcher, CachetWatchRequest(prefix: Array("e:".utf8)))
        try Self.put(writer, "e:short", "v", ttl: 1)
        #expect(try Self.event(watcher).kind == .put)
        Thread.sleep(forTimeInterval: 2.1)
        #expect(try writer.roundTrip(.get(key: Array("e:short".utf8))).status == .notFound)
        let expired = try Self.event(watcher)
        #expect(expired.kind == .expired && expired.key == Array("e:short".utf8))
        // 2 MiB into a 1 MiB tier: the oldest are evicted, and said so.
        let value = String(repeating: "x", count: 1024)
        for index in 0..<2048 { try Self.put(writer, "e:\(index)", value) }
        var evicted = 0
        for _ in 0..<4096 {
            let event = try Self.event(watcher)
            if event.kind == .evicted { evicted += 1 }
            if evicted >= 100 { break }
        }
        #expect(evicted >= 100)
    }

    @Test func aDiskTierAnnouncesWhatItEvictsAndNotWhatMemoryHandsIt() throws {
        let directory = TemporaryDirectory(prefix: "cachet-watch-disk")
        defer { directory.remove() }
        let footprint =
            CachetDiskConfiguration.minimumFootprint(standInLog: false) - CachetDiskConfiguration.minimumEntryBytes
            + 64 * 1024
        let node = try NodeProcess(arguments: [
            "--data-dir", directory.path, "--disk-limit", "\(footprint)", "--memory-limit", "1MiB",
        ])
        let writer = try node.connect()
        let watcher = try node.connect()
        _ = try Self.watch(watcher, CachetWatchRequest(prefix: Array("d:".utf8)))
        // 200 incompressible values of 1,000 bytes into 64 KiB of disk: most are evicted from disk, and said so.
        var generator = SystemRandomNumberGenerator()
        for index in 0..<200 {
            let value = (0..<1000).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(try writer.roundTrip(.put(key: Array("d:\(index)".utf8), value: value, ttl: 0)).status == .ok)
        }
        var evicted = Set<String>()
        var puts = 0
        while puts < 200 || evicted.count < 100 {
            let event = try Self.event(watcher)
            if event.kind == .put { puts += 1 }
            if event.kind == .evicted { evicted.insert(String(decoding: event.key, as: UTF8.self)) }
        }
        #expect(evicted.count >= 100 && evicted.allSatisfy { $0.hasPrefix("d:") })
    }

    @Test func aUserLimitedToPrefixesWatchesOnlyUnderThem() throws {
        let directory = TemporaryDirectory(prefix: "cachet-watch-auth")
        defer { directory.remove() }
        let file = directory.appending("users.json")
        try NodeAuthTests.writeAuthFile(file, [("shop", "shop-secret-0123456789", "read", ["shop:"])])
        let node = try NodeProcess(arguments: ["--auth-file", file, "--disk-limit", "0"])
        let socket = try node.connect()
        #expect(try NodeAuthTests.auth(socket, "shop", "shop-secret-0123456789").status == .ok)
        #expect(try socket.roundTrip(.watch(CachetWatchRequest(prefix: []))).status == .forbidden)
        #expect(try socket.roundTrip(.watch(CachetWatchRequest(prefix: Array("user:".utf8)))).status == .forbidden)
        _ = try Self.watch(socket, CachetWatchRequest(prefix: Array("shop:cart:".utf8)))
    }

    @Test func aWatchingConnectionAnswersOnlyUnwatchAndPingThenServesAgain() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let socket = try node.connect()
        _ = try Self.watch(socket, CachetWatchRequest(prefix: []))
        let refused = try socket.roundTrip(.get(key: Array("k".utf8)), id: 2)
        #expect(refused.status == .badRequest && String(decoding: refused.body, as: UTF8.self).contains("UNWATCH"))
        #expect(try socket.roundTrip(.ping, id: 3).status == .ok)
        let ended = try socket.roundTrip(.unwatch, id: 4)
        #expect(ended.status == .ok && ended.opcode == .unwatch)
        #expect(try socket.roundTrip(.get(key: Array("k".utf8)), id: 5).status == .notFound)
        // A malformed WATCH is a bad request like any other.
        try socket.send([0, 0, 0, 10, 1, 8, 0, 0, 0, 0, 0, 6, 1, 2])
        #expect(try socket.readResponse().status == .badRequest)
    }

    @Test func aWatcherThatReconnectsResumesAfterTheLastEventItSaw() throws {
        let directory = TemporaryDirectory(prefix: "cachet-watch")
        defer { directory.remove() }
        let arguments = ["--data-dir", directory.path, "--watch-retain", "30"]
        var node = try NodeProcess(arguments: arguments)
        let writer = try node.connect()
        var watcher = try node.connect()
        _ = try Self.watch(watcher, CachetWatchRequest(prefix: Array("k:".utf8)))
        try Self.put(writer, "k:1", "1")
        let seen = try Self.event(watcher)
        let position = CachetWatchPosition(run: try Self.watchRun(node), sequence: seen.sequence)
        watcher.close()
        for index in 2...4 { try Self.put(writer, "k:\(index)", "\(index)") }
        watcher = try node.connect()
        let resumed = try Self.watch(watcher, CachetWatchRequest(prefix: Array("k:".utf8), resumingAfter: position))
        #expect(resumed == position)
        let replayed = try (0..<3).map { _ in try Self.event(watcher) }
        #expect(replayed.map(\.kind) == [.put, .put, .put])
        #expect(replayed.map { String(decoding: $0.key, as: UTF8.self) } == ["k:2", "k:3", "k:4"])
        #expect(replayed.map(\.sequence) == [seen.sequence + 1, seen.sequence + 2, seen.sequence + 3])
        // A restarted node is another run: resuming there starts with a GAP.
        watcher.close()
        #expect(node.stop() == 0)
        node = try NodeProcess(arguments: arguments)
        watcher = try node.connect()
        let afterRestart = try Self.watch(
            watcher,
            CachetWatchRequest(prefix: Array("k:".utf8), resumingAfter: position)
        )
        #expect(afterRestart.run != position.run)
        #expect(try Self.event(watcher).kind == .gap)
    }

    /// The run of a node, from a WATCH of a prefix nothing uses.
    static func watchRun(_ node: NodeProcess) throws -> UInt64 {
        let socket = try node.connect()
        defer { socket.close() }
        return try watch(socket, CachetWatchRequest(prefix: Array("\u{1}nothing".utf8))).run
    }

    @Test func aResumeTheRingNoLongerHoldsStartsWithAGap() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0", "--watch-buffer", "64KiB"])
        let writer = try node.connect()
        var watcher = try node.connect()
        let start = try Self.watch(watcher, CachetWatchRequest(prefix: Array("g:".utf8)))
        watcher.close()
        let value = String(repeating: "v", count: 200)
        for index in 0..<1000 { try Self.put(writer, "g:\(index)", value) }
        watcher = try node.connect()
        _ = try Self.watch(watcher, CachetWatchRequest(prefix: Array("g:".utf8), resumingAfter: start))
        let gap = try Self.event(watcher)
        #expect(gap.kind == .gap && gap.key.isEmpty && gap.sequence > start.sequence)
        try Self.put(writer, "g:new", "x")
        let next = try Self.event(watcher)
        #expect(
            next.kind == .put && String(decoding: next.key, as: UTF8.self) == "g:new" && next.sequence > gap.sequence
        )
    }

    @Test func aWatcherThatDoesNotReadIsHeldToItsLimitAndToldItMissedChanges() throws {
        let node = try NodeProcess(arguments: [
            "--disk-limit", "0", "--watch-buffer", "1MiB", "--watch-send-limit", "64KiB",
        ])
        let writer = try node.connect()
        let stuck = try node.connect()
        stuck.setReceiveBuffer(64 << 10)
        let reader = try node.connect()
        _ = try Self.watch(stuck, CachetWatchRequest(prefix: Array("s:".utf8), includesValues: true))
        _ = try Self.watch(reader, CachetWatchRequest(prefix: Array("s:".utf8), includesValues: true))
        // 8 MiB of changes: eight times the ring, far past the stuck watcher's limit.
        let value = String(repeating: "x", count: 1000)
        let started = Date()
        var received = 0
        for index in 0..<8192 {
            try Self.put(writer, "s:\(index)", value)
            // The reading watcher keeps up.
            while received < index - 64 {
                _ = try Self.event(reader)
                received += 1
            }
        }
        #expect(Date().timeIntervalSince(started) < 30, "writers were held up by a watcher that does not read")
        let memory = try node.stats()["connection_memory_bytes"] as? Int ?? -1
        #expect(memory >= 0 && memory < 4 << 20, "\(memory) bytes held by connections")
        // The stuck watcher now reads: what was queued, then a GAP, then changes from where the ring is.
        var kinds: [CachetEventKind] = []
        var last: UInt64 = 0
        while kinds.last != .gap && kinds.count < 9000 {
            let event = try Self.event(stuck)
            #expect(event.sequence >= last)
            last = event.sequence
            kinds.append(event.kind)
        }
        #expect(kinds.last == .gap, "the stuck watcher was never told it missed changes")
        // Fewer than the writes: it was skipped forward, not sent everything.
        #expect(kinds.count < 8192, "\(kinds.count) events before the GAP")
    }
}
