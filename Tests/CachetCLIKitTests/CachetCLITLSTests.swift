import CachetIO
import CachetTestSupport
import Foundation
import Testing

/// `cachet-cli --tls` against a node's TLS port, with certificates made at test time.
@Suite("cachet-cli over TLS", .dedicatedThreads)
struct CachetCLITLSTests {
    @Test func putAndGetOverTLSAndAClearErrorForTheWrongCA() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let (fd, tlsPort) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        CachetSocket.close(fd)
        let node = try NodeProcess(arguments: [
            "--disk-limit", "0", "--tls-port", "\(tlsPort)", "--tls-cert", certificates.serverCertificate,
            "--tls-key", certificates.serverKey, "--tls-ca", certificates.caFile, "--tls-client-auth", "required",
        ])
        _ = node
        let tls = [
            "--port", "\(tlsPort)", "--tls", "--tls-ca", certificates.caFile,
            "--tls-cert", certificates.clientCertificate, "--tls-key", certificates.clientKey,
        ]
        let (output, status) = try runCLI(tls, input: "put k1 hello\nget k1\n")
        #expect(output == "OK\nhello\n")
        #expect(status == 0)

        let (refused, refusedStatus) = try runCLI(
            ["--port", "\(tlsPort)", "--tls", "--tls-ca", certificates.otherCAFile, "get", "k1"]
        )
        #expect(refusedStatus == 2)
        #expect(refused.contains("certificate verify failed"), "\(refused)")

        let (usage, usageStatus) = try runCLI(["--port", "\(tlsPort)", "--tls-ca", certificates.caFile, "get", "k1"])
        #expect(usageStatus != 0)
        #expect(usage.contains("need --tls"), "\(usage)")

        // A plain client on the TLS port is told to add --tls; --tls on the plain port, to drop it.
        let (plain, plainStatus) = try runCLI(["--port", "\(tlsPort)", "--timeout", "5", "get", "k1"])
        #expect(plainStatus == 2)
        #expect(plain.contains("add --tls"), "\(plain)")
        let (wrongPort, wrongPortStatus) = try runCLI(
            ["--port", "\(node.port)", "--tls", "--tls-ca", certificates.caFile, "--timeout", "5", "get", "k1"]
        )
        #expect(wrongPortStatus == 2)
        #expect(wrongPort.contains("does not speak TLS: drop --tls"), "\(wrongPort)")
    }
}
