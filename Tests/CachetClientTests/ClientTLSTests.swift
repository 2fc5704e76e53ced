import CachetAuth
import CachetClient
import CachetIO
import CachetTestSupport
import Foundation
import Testing

/// CachetClient over TLS (`Configuration.tls`) to a node's `--tls-port`, with certificates made at test
/// time: many tasks writing at once (the loop sends for them: a TLS session is used on one thread), large
/// values both ways, mutual TLS, a stream of changes over TLS with credentials, and a CA that does not match
/// failing every request rather than hanging.
@Suite("CachetClient over TLS", .dedicatedThreads)
struct ClientTLSTests {
    static func node(_ certificates: TestCertificates, mutual: Bool) async throws -> (NodeProcess, Int) {
        let tlsPort = closedPort()
        var arguments = [
            "--tls-port", "\(tlsPort)", "--tls-cert", certificates.serverCertificate, "--tls-key",
            certificates.serverKey,
        ]
        if mutual { arguments += ["--tls-ca", certificates.caFile, "--tls-client-auth", "required"] }
        return (try await NodeProcess.start(arguments: arguments), tlsPort)
    }

    @Test func manyTasksAndLargeValuesOverMutualTLS() async throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let (node, tlsPort) = try await Self.node(certificates, mutual: true)
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: tlsPort)])
        configuration.tls = CachetTLSConfiguration(
            certificateFile: certificates.clientCertificate,
            keyFile: certificates.clientKey,
            caFile: certificates.caFile,
            serverName: "127.0.0.1"
        )
        configuration.requestTimeout = .seconds(5)
        try await withClient(configuration) { client in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 0..<16 {
                    group.addTask {
                        for index in 0..<200 {
                            let key = "t\(task):\(index)"
                            try await client.put(key, value: Array(key.utf8))
                            let value: [UInt8]? = try await client.get(key)
                            #expect(value == Array(key.utf8))
                        }
                    }
                }
                try await group.waitForAll()
            }
            let large = PatternBytes.make(count: 2 << 20, step: 7)
            try await client.put("large", value: large)
            #expect(PatternBytes.equal(try await client.get("large"), large))
        }
        // What went over TLS is in the node, for the plain port too.
        #expect(try node.connect().roundTrip(.get(key: Array("t3:7".utf8))).body == Array("t3:7".utf8))
    }

    /// The watch's connection speaks TLS and authenticates as the client's other connections do: the user
    /// may watch its prefix, and its changes come.
    @Test(.timeLimit(.minutes(1))) func changesComeOverTLSWithCredentials() async throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let directory = TemporaryDirectory(prefix: "cachet-client-tls-watch")
        defer { directory.remove() }
        let users = directory.appending("users.json")
        let hash = CachetSecretHash(hashing: Array("shop-secret-0123456789".utf8))
        try Data(
            "{\"users\": [{\"name\": \"shop\", \"secret\": \"\(hash)\", \"role\": \"write\", \"prefixes\": [\"shop:\"]}]}"
                .utf8
        ).write(to: URL(fileURLWithPath: users))
        let tlsPort = closedPort()
        let node = try await NodeProcess.start(arguments: [
            "--tls-port", "\(tlsPort)", "--tls-cert", certificates.serverCertificate, "--tls-key",
            certificates.serverKey, "--auth-file", users, "--disk-limit", "0",
        ])
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: tlsPort)])
        configuration.tls = CachetTLSConfiguration(caFile: certificates.caFile, serverName: "127.0.0.1")
        configuration.credentials = .init(user: "shop", secret: "shop-secret-0123456789")
        configuration.requestTimeout = .seconds(5)
        try await withClient(configuration) { client in
            let received = Task { () -> [String] in
                var keys: [String] = []
                for try await change in client.changes(prefix: "shop:", values: true) {
                    keys.append(change.keyString)
                    if change.keyString == "shop:last" { break }
                }
                return keys
            }
            // Written until the watch is on (its WATCH may be answered after the first writes).
            let deadline = ContinuousClock.now + .seconds(10)
            while try await client.stats().first?[integer: "watchers"] != 1, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            for index in 0..<5 { try await client.put("shop:\(index)", value: [UInt8(index)]) }
            try await client.put("shop:last", value: [9])
            let keys = try await received.value
            #expect(keys == ["shop:0", "shop:1", "shop:2", "shop:3", "shop:4", "shop:last"])
        }
        _ = await node.terminate()
    }

    @Test func aClientThatTrustsAnotherCAFailsItsRequests() async throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let (_, tlsPort) = try await Self.node(certificates, mutual: false)
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: tlsPort)])
        configuration.tls = CachetTLSConfiguration(caFile: certificates.otherCAFile, serverName: "127.0.0.1")
        configuration.failover = false
        let failed = try await withClient(configuration) { client in
            await #expect(throws: CachetClientError.self) { try await client.put("k", value: [1]) }
        }
        #expect(failed != nil)
    }

    @Test func unreadableFilesAreAConfigurationError() throws {
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: 7420)])
        configuration.tls = CachetTLSConfiguration(caFile: "/nonexistent/ca.pem")
        #expect(throws: CachetClientError.self) { _ = try CachetClient(configuration: configuration) }
    }
}
