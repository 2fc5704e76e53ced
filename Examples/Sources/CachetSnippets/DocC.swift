// swift-format-ignore-file
// (The snippets are the documents' words, spacing included.)
import CachetClient
import Logging

// The Swift snippets of CachetClient's DocC articles (Sources/CachetClient/CachetClient.docc), as
// README.swift holds README.md's.

/// CachetClient.md, the overview.
func doccOverview() async throws {
    struct User: Codable, Sendable { var name: String }
    let client = try CachetClient(configuration: .init(nodes: [.init(host: "127.0.0.1", port: 7420)]))
    try await client.put("user:42", value: User(name: "Ada"), ttl: .seconds(60))
    let user = try await client.get("user:42", as: User.self)          // nil on a miss
    let removed: Bool = try await client.delete("user:42")
    await client.shutdown()
    _ = (user, removed)
}

/// Stands for an app's database in the read-through snippet.
struct SnippetDatabase {
    func loadUser(_ id: Int) async throws -> SnippetUser { SnippetUser(id: id, name: "Ada") }
}

/// The snippets' `User` where an article declares it in one snippet and uses it in the next.
struct SnippetUser: Codable, Sendable { var id: Int; var name: String }

/// TypedValuesChangesAndReadThrough.md.
func doccTypedValuesChangesAndReadThrough(client: CachetClient, database: SnippetDatabase) async throws {
    do {
        struct User: Codable, Sendable { var id: Int; var name: String }
        let user = User(id: 42, name: "Ada")

        try await client.put("user:42", value: user, ttl: .seconds(60))
        let cached = try await client.get("user:42", as: User.self)          // nil on a miss
        _ = cached
    }
    typealias User = SnippetUser
    var cache: [String: User] = [:]
    func reloadEverything() async throws { cache = [:] }
    for try await change in client.changes(prefix: "user:", values: true) {
        switch change.kind {
        case .put: cache[change.keyString] = try change.value(as: User.self)
        case .gap: try await reloadEverything()     // changes were missed: reload what you hold
        default: cache[change.keyString] = nil      // delete, expired, evicted; clear removes a prefix
        }
    }
    let user = try await client.get("user:42", as: User.self, ttl: .seconds(60)) {
        try await database.loadUser(42)             // called by one caller only
    }
    _ = user
}

/// UsingCachetClient.md, a cluster file.
func doccUsingCachetClient(logger: Logger) throws {
    var configuration = try CachetClient.Configuration(clusterFile: "/etc/cachet/cluster.json")
    configuration.requestTimeout = .milliseconds(250)
    let client = try CachetClient(configuration: configuration, logger: logger)
    _ = client
}
