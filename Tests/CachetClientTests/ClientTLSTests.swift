import CachetClient
import CachetIO
import CachetTestSupport
import Testing

/// CachetClient over TLS (`Configuration.tls`) to a node's `--tls-port`, with certificates made at test
/// time: many tasks writing at once (the loop sends for them: a TLS session is used on one thread), large
/// values both ways, mutual TLS, and a CA that does not match failing every request rather than hanging.
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
