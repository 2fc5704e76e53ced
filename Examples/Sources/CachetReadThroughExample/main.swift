import CachetClient
import Foundation

// Read-through with leases on the node given as HOST:PORT (default 127.0.0.1:7420): 100 tasks ask for a
// key nobody stored; the slow "database" is asked once, and every task gets its answer.
//   swift run --package-path Examples CachetReadThroughExample 127.0.0.1:7420
struct Profile: Codable, Sendable {
    var id: Int
    var name: String
}

/// Stands for a database: slow, and counting its queries.
actor Database {
    private(set) var queries = 0

    func loadProfile(_ id: Int) async throws -> Profile {
        queries += 1
        try await Task.sleep(for: .milliseconds(200))
        return Profile(id: id, name: "Grace")
    }
}

let address = CommandLine.arguments.dropFirst().first ?? "127.0.0.1:7420"
guard let node = CachetClient.Node(address: address) else {
    print("not an address: \(address) (give HOST:PORT)")
    exit(2)
}

do {
    let client = try CachetClient(configuration: .init(nodes: [node]))
    let database = Database()
    try await client.delete("profile:7")
    let names = try await withThrowingTaskGroup(of: String.self) { group in
        for _ in 0..<100 {
            group.addTask {
                try await client.get("profile:7", as: Profile.self, ttl: .seconds(60)) {
                    try await database.loadProfile(7)  // called by one caller only
                }.name
            }
        }
        var names: [String] = []
        for try await name in group { names.append(name) }
        return names
    }
    print("\(names.count) answers (\(Set(names).sorted())), \(await database.queries) database query")
    await client.shutdown()
} catch {
    print("cachet: \(error)")
}
