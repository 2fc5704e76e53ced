// swift-format-ignore-file
// (The snippets are the documents' words, spacing included.)
import CachetClient
import Foundation

// The Swift snippets of README.md, word for word inside functions, so that they compile with every build
// of this package; `SnippetTests` (in the core's CachetClusterTests) fails when a snippet of README.md or
// docs/ is not found here, line for line and in order. Nothing here is run.

/// README.md, "Use Cachet from Swift".
func readmeUseCachetFromSwift() async throws {
    struct User: Codable, Sendable { var name: String }
    let client = try CachetClient(configuration: .init(nodes: [.init(host: "127.0.0.1", port: 7420)]))
    let user = User(name: "Ada")

    try await client.put("user:42", value: user, ttl: .seconds(60))      // any Codable & Sendable value
    let cached = try await client.get("user:42", as: User.self)           // nil on a miss
    let loaded = try await client.get("user:42", as: User.self, ttl: .seconds(60)) {
        User(name: "from the database")                                   // on a miss: one caller loads, the others wait
    }
    for try await change in client.changes(prefix: "user:", values: true) {   // every node's changes, merged
        print(change.keyString, change.kind, try change.value(as: User.self) as Any)
    }
    _ = (cached, loaded)
}

/// A player's side of README.md, "Use Cachet from Swift": what the values-of-any-size snippet feeds.
struct SnippetPlayer {
    func feed(_ chunk: [UInt8]) {}
}

/// README.md, "Use Cachet from Swift", values of any size.
func readmeValuesOfAnySize(client: CachetClient, fileURL: URL, player: SnippetPlayer) async throws {
    try await client.put("video:42", contentsOf: fileURL, ttl: .seconds(3600))    // streamed from the file
    let head = try await client.get("video:42", range: 0..<1_048_576)             // bytes 0..1 MiB
    for try await chunk in client.stream("video:42") { player.feed(chunk) }       // a range at a time
    _ = head
}
