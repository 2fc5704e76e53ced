import CachetAuth
import CachetClient
import CachetTestSupport
import Foundation
import Testing

/// CachetClient's credentials (`Configuration.credentials`) against a node with users: every connection
/// authenticates first; what the user may not do fails with `forbidden`, a wrong secret or none with
/// `notAuthenticated`.
@Suite("CachetClient with credentials", .dedicatedThreads)
struct ClientAuthTests {
    @Test func theClientAuthenticatesAndItsUsersRightsHold() async throws {
        let directory = TemporaryDirectory(prefix: "cachet-client-auth")
        defer { directory.remove() }
        let file = directory.appending("users.json")
        let hash = CachetSecretHash(hashing: Array("shop-secret-0123456789".utf8))
        try Data(
            "{\"users\": [{\"name\": \"shop\", \"secret\": \"\(hash)\", \"role\": \"write\", \"prefixes\": [\"shop:\"]}]}"
                .utf8
        ).write(to: URL(fileURLWithPath: file))
        let node = try await NodeProcess.start(arguments: ["--auth-file", file, "--disk-limit", "0"])
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: node.port)])
        configuration.failover = false
        configuration.credentials = .init(user: "shop", secret: "shop-secret-0123456789")
        #expect(!"\(configuration.credentials!)".contains("secret-0123"), "the secret is not in the description")
        try await withClient(configuration) { client in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 0..<8 {
                    group.addTask {
                        for index in 0..<50 {
                            try await client.put("shop:\(task):\(index)", value: [UInt8(index)])
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await client.get("shop:3:7") == [7])
            do {
                try await client.put("user:1", value: [1])
                Issue.record("a key outside the user's prefixes was written")
            } catch {
                #expect((error as? CachetClientError)?.code == .forbidden, "\(error)")
            }
        }

        configuration.credentials = .init(user: "shop", secret: "wrong")
        try await withClient(configuration) { client in
            do {
                _ = try await client.get("shop:3:7")
                Issue.record("a wrong secret was served")
            } catch {
                #expect((error as? CachetClientError)?.code == .notAuthenticated, "\(error)")
            }
        }
        configuration.credentials = nil
        try await withClient(configuration) { client in
            do {
                _ = try await client.get("shop:3:7")
                Issue.record("a client without credentials was served")
            } catch {
                #expect((error as? CachetClientError)?.code == .notAuthenticated, "\(error)")
            }
        }
    }
}
