import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Testing

@Suite("Node: every opcode over TCP", .dedicatedThreads)
struct NodeOpcodeTests {
    @Test func putGetDeleteRoundTrip() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            #expect(
                try client.roundTrip(.put(key: [UInt8]("k1"), value: [UInt8]("hello"), ttl: 0), id: 1)
                    == CachetResponse(opcode: .put, status: .ok, id: 1)
            )
            #expect(
                try client.roundTrip(.get(key: [UInt8]("k1")), id: 2)
                    == CachetResponse(opcode: .get, status: .ok, id: 2, body: [UInt8]("hello"))
            )
            #expect(
                try client.roundTrip(.delete(key: [UInt8]("k1")), id: 3)
                    == CachetResponse(opcode: .delete, status: .ok, id: 3)
            )
            #expect(
                try client.roundTrip(.get(key: [UInt8]("k1")), id: 4)
                    == CachetResponse(opcode: .get, status: .notFound, id: 4)
            )
            #expect(
                try client.roundTrip(.delete(key: [UInt8]("k1")), id: 5)
                    == CachetResponse(opcode: .delete, status: .notFound, id: 5)
            )
        }
    }

    @Test func replacingAValueReturnsTheNewOne() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            _ = try client.roundTrip(.put(key: [UInt8]("k"), value: [UInt8]("old"), ttl: 0))
            _ = try client.roundTrip(.put(key: [UInt8]("k"), value: [UInt8]("newer value"), ttl: 0))
            #expect(try client.roundTrip(.get(key: [UInt8]("k"))).body == [UInt8]("newer value"))
        }
    }

    @Test func emptyValuesBinaryKeysAndLongestKey() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            let binaryKey: [UInt8] = [0, 255, 10, 13, 0]
            let longestKey = [UInt8](repeating: 0x61, count: CachetProtocol.maximumKeyLength)
            _ = try client.roundTrip(.put(key: binaryKey, value: [], ttl: 0))
            _ = try client.roundTrip(.put(key: longestKey, value: [1, 2, 3], ttl: 0))
            #expect(
                try client.roundTrip(.get(key: binaryKey)) == CachetResponse(opcode: .get, status: .ok, id: 1, body: [])
            )
            #expect(try client.roundTrip(.get(key: longestKey)).body == [1, 2, 3])
        }
    }

    @Test func clearReportsItemsAndBytes() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            _ = try client.roundTrip(.put(key: [UInt8]("a"), value: [UInt8]("12345"), ttl: 0))
            _ = try client.roundTrip(.put(key: [UInt8]("bb"), value: [UInt8]("678"), ttl: 0))
            let reply = try client.roundTrip(.clear, id: 9)
            #expect(reply.status == .ok)
            #expect(reply.id == 9)
            #expect(try CachetClearResult(decoding: reply.body) == CachetClearResult(items: 2, bytes: 11))
            #expect(try client.roundTrip(.get(key: [UInt8]("a"))).status == .notFound)
            #expect(
                try CachetClearResult(decoding: client.roundTrip(.clear).body) == CachetClearResult(items: 0, bytes: 0)
            )
        }
    }

    @Test func pingAndStats() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            #expect(try client.roundTrip(.ping, id: 77) == CachetResponse(opcode: .ping, status: .ok, id: 77))
            _ = try client.roundTrip(.put(key: [UInt8]("a"), value: [UInt8]("1"), ttl: 0))
            _ = try client.roundTrip(.get(key: [UInt8]("a")))
            _ = try client.roundTrip(.get(key: [UInt8]("missing")))
            let reply = try client.roundTrip(.stats, id: 5)
            #expect(reply.status == .ok && reply.opcode == .stats && reply.id == 5)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any])
            for key in [
                "items", "memory_bytes", "memory_limit", "gets", "hits", "misses", "puts", "deletes", "evictions",
                "expired", "connections_current", "connections_total", "uptime_seconds", "version",
            ] {
                #expect(object[key] != nil, "STATS lacks \(key)")
            }
            #expect(object["items"] as? Int == 1)
            #expect(object["gets"] as? Int == 2)
            #expect(object["hits"] as? Int == 1)
            #expect(object["misses"] as? Int == 1)
            #expect(object["puts"] as? Int == 1)
            #expect(object["memory_limit"] as? Int == 64 << 20)
            #expect(object["memory_pooled_bytes"] as? Int == 0)
            #expect(object["connections_current"] as? Int == 1)
            #expect(object["version"] as? String == CachetNodeServer.version)
        }
    }

    @Test func statsCountsTheBlocksOfRemovedLargeEntriesKeptForReuse() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            let value = [UInt8](repeating: 7, count: 300_000)
            _ = try client.roundTrip(.put(key: [UInt8]("big"), value: value, ttl: 0))
            #expect(try client.roundTrip(.delete(key: [UInt8]("big"))).status == .ok)
            func pooled() throws -> Int? {
                let body = try client.roundTrip(.stats).body
                let object = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
                return object?["memory_pooled_bytes"] as? Int
            }
            // 300,000 bytes of value plus header and key, rounded up to its class: 327,680.
            #expect(try pooled() == 327_680)
            // The next large PUT takes the block back.
            _ = try client.roundTrip(.put(key: [UInt8]("big"), value: value, ttl: 0))
            #expect(try pooled() == 0)
            #expect(try client.roundTrip(.get(key: [UInt8]("big"))).body == value)
        }
    }

    @Test func entriesExpireAfterTheirTTL() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            _ = try client.roundTrip(.put(key: [UInt8]("short"), value: [UInt8]("x"), ttl: 1))
            _ = try client.roundTrip(.put(key: [UInt8]("long"), value: [UInt8]("y"), ttl: 3600))
            #expect(try client.roundTrip(.get(key: [UInt8]("short"))).status == .ok)
            Thread.sleep(forTimeInterval: 2.1)
            #expect(try client.roundTrip(.get(key: [UInt8]("short"))).status == .notFound)
            #expect(try client.roundTrip(.get(key: [UInt8]("long"))).body == [UInt8]("y"))
        }
    }

    @Test func valueLargerThanTheMemoryLimitIsTooLarge() throws {
        try withNode({ $0.memoryLimit = 1 << 20 }) { _, port in
            let client = try TestSocket(port: port)
            let reply = try client.roundTrip(
                .put(key: [UInt8]("big"), value: [UInt8](repeating: 7, count: 2 << 20), ttl: 0),
                id: 3
            )
            #expect(reply.status == .tooLarge)
            #expect(reply.id == 3)
            #expect(reply.bodyText == "entry of 2097155 bytes does not fit --memory-limit 1048576")
            #expect(try client.roundTrip(.ping).status == .ok)
        }
    }

    @Test func largeValuesRoundTrip() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            var value = [UInt8](repeating: 0, count: 3 << 20)
            for i in value.indices { value[i] = UInt8(truncatingIfNeeded: i &* 31 &+ i >> 8) }
            #expect(try client.roundTrip(.put(key: [UInt8]("big"), value: value, ttl: 0)).status == .ok)
            #expect(try client.roundTrip(.get(key: [UInt8]("big"))).body == value)
        }
    }
}
