import CachetClient
import CachetTestSupport
import Testing

@Suite("CachetClient against one node")
struct ClientSingleNodeTests {
    @Test("put, get, delete, miss, String values, TTL, clear, stats, ping")
    func basicOperations() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        try await withClient(cluster.configuration()) { client in
            let bytes: [UInt8] = [0, 1, 2, 255]
            try await client.put("user:42", value: bytes, ttl: .seconds(60))
            let value: [UInt8]? = try await client.get("user:42")
            #expect(value == bytes)
            #expect(try await client.get("absent") == nil)

            try await client.put([0xff, 0x00, 0x0a], value: [])
            #expect(try await client.get([0xff, 0x00, 0x0a]) == [])

            try await client.put("greeting", value: "héllo")
            #expect(try await client.getString("greeting") == "héllo")

            let removed: Bool = try await client.delete("user:42")
            #expect(removed)
            #expect(try await client.get("user:42") == nil)
            #expect(try await client.delete("never-stored") == false)

            let stats = try await client.stats()
            #expect(stats.count == 1)
            #expect(stats[0].items == 2)
            #expect(stats[0].version != nil)
            #expect(stats[0].node == cluster.node(0).id)

            let pings = try await client.ping()
            #expect(pings.map(\.node) == [cluster.node(0).id])

            try await client.put("user:1", value: "x")
            let byPrefix = try await client.clear(prefixes: ["user:", "nothing:"])
            #expect(byPrefix == [CachetNodeClearResult(node: cluster.node(0).id, items: 1, bytes: 6 + 1)])
            #expect(try await client.getString("greeting") == "héllo")
            await #expect(throws: CachetClientError.self) { try await client.clear(prefixes: [""]) }

            let cleared = try await client.clear()
            #expect(cleared == [CachetNodeClearResult(node: cluster.node(0).id, items: 2, bytes: 3 + 0 + 8 + 6)])
            #expect(try await client.get("greeting") == nil)
        }
    }

    @Test("a large value round-trips")
    func largeValue() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        try await withClient(cluster.configuration()) { client in
            let value = PatternBytes.make(count: 3 << 20, step: 31)
            try await client.put("big", value: value)
            #expect(PatternBytes.equal(try await client.get("big"), value))
        }
    }

    @Test("large values from several tasks at once, with small requests between them, on one connection")
    func largeValuesShareOneConnection() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        // One connection: each large PUT fills the socket, so the event loop finishes sending it while the
        // other tasks' requests queue behind it; every reply must still reach its own caller.
        try await withClient(cluster.configuration { $0.connectionsPerNode = 1 }) { client in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 0..<4 {
                    group.addTask {
                        let value = PatternBytes.make(count: 8 << 20, seed: task)
                        try await client.put("large:\(task)", value: value)
                        for round in 0..<20 {
                            try await client.put("small:\(task):\(round)", value: [UInt8(task), UInt8(round)])
                            #expect(try await client.get("small:\(task):\(round)") == [UInt8(task), UInt8(round)])
                        }
                        let back = try await client.get("large:\(task)")
                        #expect(PatternBytes.equal(back, value), "task \(task)'s large value came back changed")
                    }
                }
                try await group.waitForAll()
            }
        }
    }

    @Test("batched get and put")
    func batches() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        try await withClient(cluster.configuration()) { client in
            var entries: [String: [UInt8]] = [:]
            for index in 0..<500 { entries["batch:\(index)"] = Array("value-\(index)".utf8) }
            try await client.put(entries)
            let keys = (0..<510).map { "batch:\($0)" }
            let values = try await client.get(keys)
            #expect(values.count == keys.count)
            for (index, value) in values.enumerated() {
                #expect(value == (index < 500 ? Array("value-\(index)".utf8) : nil))
            }
            #expect(try await client.get([String]()) == [])
        }
    }

    @Test("bad input fails before anything is sent")
    func validation() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        try await withClient(cluster.configuration()) { client in
            await expectFailure(.badRequest) { () throws(CachetClientError) in _ = try await client.get("") }
            await expectFailure(.tooLarge) { () throws(CachetClientError) in
                _ = try await client.get(String(repeating: "k", count: 4097))
            }
            await expectFailure(.badRequest) { () throws(CachetClientError) in
                try await client.put("k", value: [], ttl: .zero)
            }
            await expectFailure(.tooLarge) { () throws(CachetClientError) in
                try await client.put("k", value: [UInt8](repeating: 1, count: (64 << 20) - 14))
            }
            // Nothing of the above reached the node.
            let stats = try await client.stats()
            #expect(stats[0][integer: "gets"] == 0)
            #expect(stats[0][integer: "puts"] == 0)
            #expect(stats[0][integer: "bad_requests"] == 0)
        }
    }
}

@Suite("CachetClient: values with the TTL left")
struct ClientTTLTests {
    struct Report: Codable, Sendable, Equatable { var id: Int }

    @Test("getWithTTL reads the value its writers stored and the node's TTL left")
    func getWithTTL() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        try await withClient(cluster.configuration()) { client in
            try await client.put("report:7", value: Report(id: 7), ttl: .seconds(120))
            let entry = try #require(try await client.getWithTTL("report:7"))
            // The bytes are the typed call's, unwrapped: any client or driver reads the same value.
            #expect(entry.value == (try await client.get("report:7")))
            let seconds = try #require(entry.ttl).components.seconds
            #expect(seconds > 110 && seconds <= 120)
            let typed = try #require(try await client.getWithTTL("report:7", as: Report.self))
            #expect(typed.value == Report(id: 7))

            try await client.put("forever", value: "x")
            #expect(try await client.getWithTTL("forever") == CachetEntryWithTTL(value: Array("x".utf8), ttl: nil))
            #expect(try await client.getWithTTL("absent") == nil)
            await #expect(throws: CachetClientError.self) { try await client.getWithTTL("forever", as: Report.self) }
        }
    }
}

@Suite("CachetClient: ranges of a value")
struct ClientRangeTests {
    @Test("get(_:range:) reads just the bytes asked for and the value's length, routed by the ring")
    func ranges() async throws {
        let cluster = try await NodeCluster.start(count: 3)
        let value = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try await withClient(cluster.configuration()) { client in
            try await client.put("video:42", value: value)
            let head = try #require(try await client.get("video:42", range: 0..<1024))
            #expect(head.bytes == Array(value[0..<1024]) && head.totalLength == 5000 && head.offset == 0)
            #expect(head.tag == (try #require(try await client.get("video:42", range: 9..<10))).tag && head.tag != 0)
            let tail = try #require(try await client.get("video:42", range: 4990..<6000))
            #expect(tail.bytes == Array(value[4990...]) && tail.offset == 4990 && tail.totalLength == 5000)
            #expect(try await client.get("video:42", from: 4999)?.bytes == [value[4999]])
            #expect(try await client.get("video:42", range: 5000..<5000)?.bytes == [])
            #expect(try await client.get("absent", range: 0..<10) == nil)
            do {
                _ = try await client.get("video:42", range: 5001..<5002)
                Issue.record("a range past the end was answered")
            } catch let error as CachetClientError {
                #expect(error.code == .rangeNotSatisfiable && error.message.contains("5000 bytes"), "\(error)")
            }
            await #expect(throws: CachetClientError.self) { try await client.get("video:42", range: -1..<3) }
        }
    }
}
