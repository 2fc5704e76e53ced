import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// Large PUTs are read straight into their entries (no disk tier): the bytes that arrive, in whatever
/// pieces, must make exactly the value sent, and a PUT cut off half-way must leave no trace.
@Suite("Node: large values received in place", .dedicatedThreads)
struct NodeLargeValueTests {
    func pattern(_ count: Int, seed: UInt8) -> [UInt8] {
        PatternBytes.make(count: count, step: 31, seed: Int(seed))
    }

    @Test func aLargePutSentInPiecesWithARequestBehindItIsStoredExactly() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            let value = pattern(1_500_000, seed: 3)
            let put = CachetCommand.put(key: Array("big".utf8), value: value, ttl: 0).encoded(id: 1)
            let get = CachetCommand.get(key: Array("big".utf8)).encoded(id: 2)
            // Uneven pieces, the first ending inside the header, the last carrying the GET as well.
            let stream = put + get
            var offset = 0
            for size in [7, 13, 65_536, 1, 300_000, 999] {
                try client.send(Array(stream[offset..<(offset + size)]))
                offset += size
                usleep(2_000)
            }
            try client.send(Array(stream[offset...]))
            #expect(try client.readResponse() == CachetResponse(opcode: .put, status: .ok, id: 1))
            let reply = try client.readResponse()
            #expect(reply.id == 2 && reply.status == .ok)
            #expect(reply.body == value)
        }
    }

    @Test func aPeerThatVanishesMidValueLeavesTheOldValueAndNoMemoryBehind() throws {
        try withNode { server, port in
            let keeper = try TestSocket(port: port)
            let old = pattern(200_000, seed: 1)
            #expect(try keeper.roundTrip(.put(key: Array("k".utf8), value: old, ttl: 0)).status == .ok)
            let before = server.memory.statistics
            for cut in [30, 100_000, 1_199_999] {
                let quitter = try TestSocket(port: port)
                let put = CachetCommand.put(key: Array("k".utf8), value: pattern(1_200_000, seed: 2), ttl: 0)
                    .encoded(id: 9)
                try quitter.send(Array(put.prefix(4 + 8 + 6 + 1 + cut)))
                usleep(20_000)
                quitter.close()
            }
            usleep(50_000)
            #expect(try keeper.roundTrip(.get(key: Array("k".utf8))).body == old)
            // Each abandoned entry's block went back to the pool of large blocks, where the next one took it:
            // one block of the 1.2 MB value's size class (1.25 MiB) is left there, nothing is lost.
            var after = server.memory.statistics
            #expect(after.pooledBytes == 1_310_720)
            after.pooledBytes = before.pooledBytes
            #expect(after == before)
        }
    }

    @Test func interleavedLargeAndSmallRequestsOnSeveralConnections() throws {
        try withNode({ $0.memoryLimit = 256 << 20 }) { _, port in
            let clients = try (0..<3).map { _ in try TestSocket(port: port) }
            var random = SplitMix64(state: 11)
            var model: [String: [UInt8]] = [:]
            for round in 0..<40 {
                let client = clients[round % clients.count]
                let key = "key-\(random.next() % 6)"
                let size = [10, 70_000, 300_000, 1_000_000][Int(random.next() % 4)]
                let value = pattern(size, seed: UInt8(truncatingIfNeeded: round))
                // A PUT and a GET of the same key, and a GET of another, in one write.
                let other = "key-\(random.next() % 6)"
                var batch = CachetCommand.put(key: Array(key.utf8), value: value, ttl: 0).encoded(id: 1)
                batch += CachetCommand.get(key: Array(key.utf8)).encoded(id: 2)
                batch += CachetCommand.get(key: Array(other.utf8)).encoded(id: 3)
                try client.send(batch)
                model[key] = value
                #expect(try client.readResponse().status == .ok)
                #expect(try client.readResponse().body == value)
                let reply = try client.readResponse()
                if let expected = model[other] {
                    #expect(reply.status == .ok && reply.body == expected, "round \(round)")
                } else {
                    #expect(reply.status == .notFound, "round \(round)")
                }
            }
        }
    }

    /// A node without a disk tier holds no value longer than `--large-value`: a whole PUT, one received in
    /// place, an item write and a memcached set longer than it are refused, each saying why, and leave the
    /// key's older value; one of exactly that length is stored.
    @Test func aNodeWithoutADiskTierRefusesValuesLongerThanTheLargeValueThreshold() throws {
        let threshold = 300_000
        try withNode({
            $0.largeValueThreshold = threshold
            $0.memcachedPort = 0
            $0.memcachedItemSize = 4 << 20
        }) { server, port in
            let client = try TestSocket(port: port)
            let key = Array("video".utf8)
            let exact = pattern(threshold, seed: 5)
            #expect(try client.roundTrip(.put(key: key, value: exact, ttl: 0)).status == .ok)
            #expect(try client.roundTrip(.get(key: key)).body == exact)
            let payload = { try TestSocket(port: port).roundTrip(.stats).bodyText }
            let before = try payload()
            // A PUT of one byte more, sent in pieces (received in place from its first 64 KiB on), and whole.
            let longer = CachetCommand.put(key: key, value: pattern(threshold + 1, seed: 6), ttl: 0).encoded(id: 2)
            try client.send(Array(longer[..<100_000]))
            usleep(20_000)
            try client.send(Array(longer[100_000...]))
            let refused = try client.readResponse()
            #expect(refused.status == .tooLarge && refused.id == 2, "\(refused.bodyText)")
            #expect(refused.bodyText.contains("--large-value 300000"), "\(refused.bodyText)")
            #expect(refused.bodyText.contains("disk tier"), "\(refused.bodyText)")
            #expect(try client.roundTrip(.get(key: key)).body == exact, "the older value stays")
            // A much longer one is not gathered in the input either: its bytes are thrown away as they arrive.
            let huge = CachetCommand.put(key: key, value: pattern(4 << 20, seed: 9), ttl: 0).encoded(id: 3)
            try client.send(Array(huge[..<(2 << 20)]))
            usleep(100_000)
            let held = try TestSocket(port: port).roundTrip(.stats).bodyText
            let charged = held.split(separator: ",").first { $0.contains("\"connection_memory_bytes\"") }
            let bytes = charged.flatMap { Int($0.split(separator: ":").last ?? "") } ?? .max
            #expect(bytes < 1 << 20, "half of a 4 MiB PUT holds \(bytes) bytes of the budget")
            try client.send(Array(huge[(2 << 20)...]))
            let refusedHuge = try client.readResponse()
            #expect(refusedHuge.status == .tooLarge && refusedHuge.id == 3, "\(refusedHuge.bodyText)")
            #expect(try client.roundTrip(.get(key: key)).body == exact, "the older value stays, the framing holds")
            // An item write, and an item append that would make the value longer.
            let item = try NodeItemTests.write(.set, "video", pattern(threshold + 1, seed: 7), on: client)
            #expect(item.status == .tooLarge && item.bodyText.contains("--large-value"), "\(item.bodyText)")
            #expect(try NodeItemTests.write(.set, "item", pattern(threshold - 1, seed: 8), on: client).status == .ok)
            let append = try NodeItemTests.write(.append, "item", [1, 2], on: client)
            #expect(append.status == .tooLarge, "\(append.bodyText)")
            // memcached's port: its item size is bounded by --large-value as well.
            let memcache = try MemcacheTextClient(port: try #require(server.memcachedPort))
            let text = String(repeating: "v", count: threshold + 1)
            #expect(
                try memcache.exchange("set video 0 0 \(threshold + 1)\r\n\(text)\r\n")
                    == ["SERVER_ERROR object too large for cache"]
            )
            #expect(try client.roundTrip(.get(key: key)).status == .notFound, "memcached's rule: the set removes it")
            let stats = try payload()
            #expect(stats.contains("\"large_value_threshold\":300000"), "\(stats)")
            #expect(before.contains("\"large_value_threshold\":300000"))
        }
    }
}
