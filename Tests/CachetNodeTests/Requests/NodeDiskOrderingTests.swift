import CachetTestSupport
import CachetWire
import Testing

/// Requests sent in one write, so that the node handles them before its disk queue can apply the writes
/// among them: the answers must be the same as if every write had already reached the disk.
@Suite("Node with a disk tier: answers while writes are queued", .dedicatedThreads)
struct NodeDiskOrderingTests {
    private static func pipeline(_ client: TestSocket, _ commands: [CachetCommand]) throws -> [CachetResponse] {
        var bytes: [UInt8] = []
        for (index, command) in commands.enumerated() { command.encode(id: UInt32(index + 1), to: &bytes) }
        try client.send(bytes)
        return try commands.indices.map { index in
            let reply = try client.readResponse()
            #expect(reply.id == UInt32(index + 1))
            return reply
        }
    }

    @Test func secondDeleteOfAKeyIsNotFound() throws {
        let data = TemporaryDirectory(prefix: "cachet-disk-ordering")
        defer { data.remove() }
        let node = try NodeProcess(arguments: ["--data-dir", data.path])
        defer { _ = node.stop() }
        let client = try node.connect()
        for round in 0..<20 {
            let key = Array("k\(round)".utf8)
            let replies = try Self.pipeline(
                client,
                [
                    .put(key: key, value: value(for: round, version: 0), ttl: 0), .delete(key: key), .delete(key: key),
                    .get(key: key),
                ]
            )
            #expect(replies.map(\.status) == [.ok, .ok, .notFound, .notFound], "round \(round)")
        }
    }

    @Test func severalKeysInterleaved() throws {
        let data = TemporaryDirectory(prefix: "cachet-disk-ordering")
        defer { data.remove() }
        let node = try NodeProcess(arguments: ["--data-dir", data.path])
        defer { _ = node.stop() }
        let client = try node.connect()
        for round in 0..<10 {
            let keys = (0..<4).map { Array("r\(round)k\($0)".utf8) }
            var commands: [CachetCommand] = keys.enumerated().map {
                .put(key: $1, value: value(for: $0, version: round), ttl: 0)
            }
            commands += keys.map { .delete(key: $0) }
            commands += keys.map { .delete(key: $0) }
            commands += keys.map { .get(key: $0) }
            commands.append(.put(key: keys[0], value: value(for: 0, version: round + 1), ttl: 0))
            commands.append(.get(key: keys[0]))
            commands.append(.delete(key: keys[0]))
            let replies = try Self.pipeline(client, commands)
            let expected: [CachetStatus] =
                Array(repeating: .ok, count: 8) + Array(repeating: .notFound, count: 8) + [.ok, .ok, .ok]
            #expect(replies.map(\.status) == expected, "round \(round)")
            #expect(replies[17].body == value(for: 0, version: round + 1))
        }
        try waitForDiskQueue(client)
        // Once every write is applied, the answers are the same.
        for round in 0..<10 {
            for index in 0..<4 {
                #expect(try client.roundTrip(.delete(key: Array("r\(round)k\(index)".utf8))).status == .notFound)
            }
        }
    }

    /// Entries larger than the memory tier live on disk only: while their write is queued, the key is in
    /// neither memory nor the disk index, yet it exists.
    @Test func diskOnlyEntriesCountWhileTheirWriteIsQueued() throws {
        let data = TemporaryDirectory(prefix: "cachet-disk-ordering")
        defer { data.remove() }
        let node = try NodeProcess(arguments: ["--data-dir", data.path, "--memory-limit", "1MiB"])
        defer { _ = node.stop() }
        let client = try node.connect()
        let big = [UInt8](repeating: 7, count: 3 << 20)
        for round in 0..<3 {
            let key = Array("big\(round)".utf8)
            let replies = try Self.pipeline(
                client,
                [
                    .put(key: key, value: big, ttl: 0), .get(key: key), .delete(key: key), .delete(key: key),
                    .get(key: key), .put(key: key, value: big, ttl: 0), .delete(key: key),
                ]
            )
            #expect(replies.map(\.status) == [.ok, .ok, .ok, .notFound, .notFound, .ok, .ok], "round \(round)")
            #expect(replies[1].body == big)
        }
    }
}
