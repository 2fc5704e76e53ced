import CachetClient
import CachetTestSupport
import Synchronization
import Testing

/// Typed values and read-through against a real node: the app's own Codable types in and out with each
/// coder, a value that does not decode named in the error, and concurrent misses of one key calling
/// the loader once.
@Suite("CachetClient: typed values and read-through")
struct ClientTypedValueTests {
    struct User: Codable, Sendable, Equatable {
        var id: Int
        var name: String
        var roles: [String]
    }

    struct Order: Codable, Sendable { var total: Double }

    @Test(arguments: [0, 1])
    func typedValuesRoundTripAndAMismatchIsAnError(coder index: Int) async throws {
        let coder: any CachetCoder = index == 0 ? CachetJSONCoder() : CachetBinaryCoder()
        let cluster = try await NodeCluster.start(count: 1)
        let client = try CachetClient(configuration: cluster.configuration(), coder: coder)
        defer { Task { await client.shutdown() } }
        let user = User(id: 42, name: "Ada", roles: ["admin"])
        try await client.put("user:42", value: user, ttl: .seconds(60))
        #expect(try await client.get("user:42", as: User.self) == user)
        #expect(try await client.get("user:43", as: User.self) == nil)
        // Keys of any CustomStringConvertible type, and of bytes.
        try await client.put(42, value: user)
        #expect(try await client.get("42", as: User.self) == user)
        try await client.put([0xff, 0], value: user)
        #expect(try await client.get([0xff, 0], as: User.self) == user)
        // Bytes and strings stay raw whichever call takes them: an array literal, bytes of a string, a String.
        try await client.put("raw:literal", value: [1, 2])
        #expect(try await client.get("raw:literal") == [1, 2])
        let name = "raw:utf8"
        try await client.put(name, value: Array(name.utf8))
        #expect(try await client.get(name) == Array(name.utf8))
        #expect(try await client.get(name, as: [UInt8].self) == Array(name.utf8))
        #expect(try await client.get(name, as: String.self) == name)
        // Raw bytes stored by another consumer are not a User: an error naming the key and the type.
        try await client.put("raw", value: [0x01, 0x02, 0x03])
        do {
            _ = try await client.get("raw", as: User.self)
            Issue.record("three raw bytes decoded as a User")
        } catch {
            #expect(error.code == .decodingFailed)
            #expect(error.message.contains("'raw'") && error.message.contains("User"), "\(error.message)")
        }
        do {
            _ = try await client.get("user:42", as: Order.self)
            Issue.record("a User decoded as an Order")
        } catch {
            #expect(error.code == .decodingFailed && error.message.contains("Order"), "\(error.message)")
        }
        await client.shutdown()
    }

    @Test func clientsThatMissTheSameKeyWaitForTheLeaseHoldersValue() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        let loads = LoadCounter()
        let clients = try (0..<4).map { _ in try CachetClient(configuration: cluster.configuration()) }
        let names = try await withThrowingTaskGroup(of: String.self) { group in
            for client in clients {
                for _ in 0..<10 {
                    group.addTask {
                        try await client.get("shared", as: User.self, ttl: .seconds(30)) {
                            loads.add()
                            try await Task.sleep(for: .milliseconds(200))
                            return User(id: 1, name: "loaded once", roles: [])
                        }.name
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(names.count == 40 && names.allSatisfy { $0 == "loaded once" })
        #expect(loads.count == 1, "four clients missed one key together: the node's lease lets one load")
        for client in clients { await client.shutdown() }
    }

    /// `add` stores only into an absent key: of 4 clients x 10 tasks adding one key at once exactly one
    /// stores (its value is the one read back); a key that holds a value is not overwritten; a deleted one
    /// is absent again; a TTL is kept.
    @Test func addStoresOnlyWhenTheKeyIsAbsentAndOneOfManyConcurrentAddsWins() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        let clients = try (0..<4).map { _ in try CachetClient(configuration: cluster.configuration()) }
        let winners = try await withThrowingTaskGroup(of: String?.self) { group in
            for (index, client) in clients.enumerated() {
                for task in 0..<10 {
                    group.addTask {
                        let name = "adder \(index)-\(task)"
                        let user = User(id: index * 10 + task, name: name, roles: [])
                        return try await client.add("session:1", value: user, ttl: .seconds(60)) ? name : nil
                    }
                }
            }
            return try await group.reduce(into: [String]()) { if let name = $1 { $0.append(name) } }
        }
        #expect(winners.count == 1, "\(winners)")
        let client = clients[0]
        #expect(try await client.get("session:1", as: User.self)?.name == winners.first)
        // Present: not overwritten.
        #expect(try await client.add("session:1", value: User(id: -1, name: "late", roles: [])) == false)
        #expect(try await client.get("session:1", as: User.self)?.name == winners.first)
        // Deleted: absent again.
        #expect(try await client.delete("session:1"))
        #expect(try await client.add("session:1", value: User(id: 2, name: "second", roles: [])))
        #expect(try await client.get("session:1", as: User.self)?.name == "second")
        // With a TTL: gone after it.
        #expect(try await client.add("session:short", value: "x", ttl: .seconds(1)))
        try await Task.sleep(for: .milliseconds(2100))
        #expect(try await client.get("session:short") == nil)
        #expect(try await client.add("session:short", value: "y"))
        for client in clients { await client.shutdown() }
    }

    @Test func concurrentMissesOfOneKeyCallTheLoaderOnce() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        try await withClient(cluster.configuration()) { client in
            let loads = LoadCounter()
            let users = try await withThrowingTaskGroup(of: User.self) { group in
                for _ in 0..<50 {
                    group.addTask {
                        try await client.get("user:7", as: User.self, ttl: .seconds(30)) {
                            loads.add()
                            try await Task.sleep(for: .milliseconds(100))
                            return User(id: 7, name: "Grace", roles: [])
                        }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(loads.count == 1)
            #expect(users.count == 50 && users.allSatisfy { $0.id == 7 })
            // Stored: the next read is a hit, and the loader is not called.
            let again = try await client.get("user:7", as: User.self, ttl: .seconds(30)) {
                loads.add()
                return User(id: 0, name: "", roles: [])
            }
            #expect(again.name == "Grace" && loads.count == 1)
            // A loader that fails fails every caller that waited for it, and stores nothing.
            struct Unreachable: Error {}
            await #expect(throws: Unreachable.self) {
                _ = try await client.get("user:8", as: User.self) { throw Unreachable() }
            }
            #expect(try await client.get("user:8") == nil)
        }
    }
}

/// Counts a loader's calls from any task.
final class LoadCounter: Sendable {
    private let calls = Mutex(0)
    func add() { calls.withLock { $0 += 1 } }
    var count: Int { calls.withLock { $0 } }
}
