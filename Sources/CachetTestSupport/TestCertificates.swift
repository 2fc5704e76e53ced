import Foundation

/// Certificates made at test time with the `openssl` command (never checked in): a CA, a server
/// certificate it signed for `localhost` and `127.0.0.1`, a client certificate it signed, and a second,
/// unrelated CA with a server certificate of its own (for a client that trusts the wrong CA, or a server
/// whose files are replaced), and a server and a client certificate the CA signed that have expired. Keys
/// are P-256, certificates valid for two days (the expired ones ended a day before they began). In a
/// temporary directory, removed by ``remove()``.
public final class TestCertificates: Sendable {
    /// Where the files are.
    public let directory: TemporaryDirectory

    /// The CA's certificate.
    public var caFile: String { directory.appending("ca.pem") }
    /// The server's certificate (signed by the CA) and its key.
    public var serverCertificate: String { directory.appending("server.pem") }
    public var serverKey: String { directory.appending("server.key") }
    /// A client certificate (signed by the CA) and its key.
    public var clientCertificate: String { directory.appending("client.pem") }
    public var clientKey: String { directory.appending("client.key") }
    /// Another CA, and a server certificate and key it signed.
    public var otherCAFile: String { directory.appending("other-ca.pem") }
    public var otherServerCertificate: String { directory.appending("other-server.pem") }
    public var otherServerKey: String { directory.appending("other-server.key") }
    /// A server certificate for `localhost` and `127.0.0.1` and a client certificate, signed by the CA,
    /// both expired, and their keys.
    public var expiredServerCertificate: String { directory.appending("expired-server.pem") }
    public var expiredServerKey: String { directory.appending("expired-server.key") }
    public var expiredClientCertificate: String { directory.appending("expired-client.pem") }
    public var expiredClientKey: String { directory.appending("expired-client.key") }

    /// Makes every file.
    /// - Throws: when `openssl` is missing or fails (its output in the message).
    public init() throws {
        directory = TemporaryDirectory(prefix: "cachet-certificates")
        try makeCA("ca", name: "Cachet Test CA")
        try makeCA("other-ca", name: "Another Test CA")
        try makeLeaf("server", ca: "ca", name: "localhost", alternativeNames: "DNS:localhost,IP:127.0.0.1")
        try makeLeaf("client", ca: "ca", name: "cachet-client", alternativeNames: "DNS:cachet-client")
        try makeLeaf("other-server", ca: "other-ca", name: "localhost", alternativeNames: "DNS:localhost,IP:127.0.0.1")
        try makeLeaf(
            "expired-server",
            ca: "ca",
            name: "localhost",
            alternativeNames: "DNS:localhost,IP:127.0.0.1",
            days: -1
        )
        try makeLeaf("expired-client", ca: "ca", name: "cachet-client", alternativeNames: "DNS:cachet-client", days: -1)
    }

    /// Removes the directory.
    public func remove() { directory.remove() }

    private func makeCA(_ base: String, name: String) throws {
        try openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", directory.appending("\(base).key"), "-out", directory.appending("\(base).pem"),
            "-days", "2", "-subj", "/CN=\(name)",
        ])
    }

    /// A certificate the CA `ca` signs, valid for `days` from now (a negative count: it ended before it
    /// began, so it has expired).
    private func makeLeaf(_ base: String, ca: String, name: String, alternativeNames: String, days: Int = 2) throws {
        let request = directory.appending("\(base).csr")
        let extensions = directory.appending("\(base).ext")
        try Data("subjectAltName=\(alternativeNames)\n".utf8).write(to: URL(fileURLWithPath: extensions))
        try openssl([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", directory.appending("\(base).key"), "-out", request, "-subj", "/CN=\(name)",
        ])
        try openssl([
            "x509", "-req", "-in", request, "-CA", directory.appending("\(ca).pem"),
            "-CAkey", directory.appending("\(ca).key"), "-CAcreateserial", "-out", directory.appending("\(base).pem"),
            "-days", "\(days)", "-extfile", extensions,
        ])
    }

    private func openssl(_ arguments: [String]) throws {
        let (output, status) = try runProcess("/usr/bin/openssl", arguments)
        guard status == 0 else {
            throw TestSocketError(
                description: "openssl \(arguments.prefix(2).joined(separator: " ")) failed: \(output)"
            )
        }
    }
}
