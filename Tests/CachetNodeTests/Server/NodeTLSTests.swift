import CachetCluster
import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// TLS on the node (`--tls-port` beside `--port`), with certificates made at test time and real node
/// processes: a handshake that succeeds, and each way one fails ending in a closed connection and, on the
/// node's side, a log line, never a stuck connection.
@Suite("Node: TLS", .serialized, .dedicatedThreads)
struct NodeTLSTests {
    /// A free port for the TLS listener (bound and released: the node binds it right after).
    static func freePort() throws -> Int {
        let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        CachetSocket.close(fd)
        return port
    }

    /// A node with a TLS listener on the test certificates; returns it and its TLS port.
    static func node(_ certificates: TestCertificates, _ extra: [String] = []) throws -> (NodeProcess, Int) {
        let tlsPort = try freePort()
        let node = try NodeProcess(
            arguments: [
                "--tls-port", "\(tlsPort)", "--tls-cert", certificates.serverCertificate,
                "--tls-key", certificates.serverKey, "--log-level", "info",
            ] + extra
        )
        return (node, tlsPort)
    }

    /// A client context trusting `ca`, checking the name 127.0.0.1, presenting `certificate` if given.
    static func client(ca: String, certificate: String? = nil, key: String? = nil) throws -> CachetTLSContext {
        try CachetTLSContext(
            role: .client,
            configuration: CachetTLSConfiguration(
                certificateFile: certificate,
                keyFile: key,
                caFile: ca,
                serverName: "127.0.0.1"
            )
        )
    }

    /// One request and its reply over a blocking connection (TLS or plain).
    static func roundTrip(
        _ command: CachetCommand,
        on connection: CachetBlockingConnection,
        flags: CachetRequestFlags = []
    ) throws -> CachetResponse {
        try connection.send(command.encoded(id: 7, flags: flags), until: CachetDeadline(after: .seconds(5)))
        while true {
            let region = connection.input.readableRegion
            if let frame = try CachetReplyDecoder.decodeReply(in: region, maximumPayloadLength: 1 << 20) {
                let response = CachetResponse(frame: frame, in: region)
                connection.input.moveReadIndex(forwardBy: frame.end)
                return response
            }
            guard try connection.receive(until: CachetDeadline(after: .seconds(5))) > 0 else {
                throw TestSocketError(description: "the node closed the connection")
            }
        }
    }

    /// Waits up to 5 s for `text` in the node's log.
    static func logs(_ node: NodeProcess, _ text: String) -> Bool {
        let deadline = Date().addingTimeInterval(5)
        while !node.log.contains(text) {
            guard Date() < deadline else { return false }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return true
    }

    @Test func aClientOnTheTLSPortIsServedAsOnThePlainOne() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let (node, tlsPort) = try Self.node(certificates)
        let secure = try CachetBlockingConnection(
            to: CachetAddress(host: "127.0.0.1", port: tlsPort),
            timeout: .seconds(5),
            tls: try Self.client(ca: certificates.caFile)
        )
        #expect(secure.tls?.protocolVersion == "TLSv1.3")
        let value = [UInt8](repeating: 0x42, count: 100_000)
        #expect(try Self.roundTrip(.put(key: Array("k".utf8), value: value, ttl: 0), on: secure).status == .ok)
        #expect(try Self.roundTrip(.get(key: Array("k".utf8)), on: secure).body == value)
        // The plain port serves the same store.
        #expect(try node.connect().roundTrip(.get(key: Array("k".utf8))).body == value)
    }

    @Test func plainTextOnTheTLSPortIsClosedWithALogLine() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let (node, tlsPort) = try Self.node(certificates)
        let plain = try TestSocket(port: tlsPort, timeout: 5)
        try plain.send(CachetCommand.ping.encoded(id: 1))
        #expect(plain.waitForClose(), "the node closed the connection")
        #expect(Self.logs(node, "TLS handshake failed"), "\(node.log.suffix(800))")
    }

    @Test func TLSOnThePlainPortFailsTheHandshake() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let (node, _) = try Self.node(certificates)
        #expect(throws: CachetIOError.self) {
            _ = try CachetBlockingConnection(
                to: CachetAddress(host: "127.0.0.1", port: node.port),
                timeout: .seconds(5),
                tls: try Self.client(ca: certificates.caFile)
            )
        }
        // The node answers the bytes as a bad frame and goes on serving.
        #expect(try node.connect().roundTrip(.ping).status == .ok)
    }

    @Test func aClientThatTrustsAnotherCARefusesTheNode() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let (node, tlsPort) = try Self.node(certificates)
        var failure: CachetIOError?
        do {
            _ = try CachetBlockingConnection(
                to: CachetAddress(host: "127.0.0.1", port: tlsPort),
                timeout: .seconds(5),
                tls: try Self.client(ca: certificates.otherCAFile)
            )
        } catch let error as CachetIOError {
            failure = error
        }
        #expect(failure?.code == .tlsHandshakeFailed)
        #expect(failure?.message.contains("certificate verify failed") == true, "\(failure?.message ?? "")")
        #expect(Self.logs(node, "TLS handshake failed"))
    }

    @Test func anExpiredCertificateFailsTheHandshakeOnEitherSide() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        // The node's certificate has expired: a client that trusts its CA refuses it.
        let tlsPort = try Self.freePort()
        let expired = try NodeProcess(arguments: [
            "--tls-port", "\(tlsPort)", "--tls-cert", certificates.expiredServerCertificate,
            "--tls-key", certificates.expiredServerKey, "--log-level", "info",
        ])
        var failure: CachetIOError?
        do {
            _ = try CachetBlockingConnection(
                to: CachetAddress(host: "127.0.0.1", port: tlsPort),
                timeout: .seconds(5),
                tls: try Self.client(ca: certificates.caFile)
            )
        } catch let error as CachetIOError {
            failure = error
        }
        #expect(failure?.code == .tlsHandshakeFailed)
        #expect(failure?.message.contains("certificate has expired") == true, "\(failure?.message ?? "")")
        #expect(Self.logs(expired, "TLS handshake failed"))

        // The client's certificate has expired: a node that requires one refuses it, and says why.
        let (node, port) = try Self.node(
            certificates,
            ["--tls-ca", certificates.caFile, "--tls-client-auth", "required"]
        )
        var refused = false
        do {
            let connection = try CachetBlockingConnection(
                to: CachetAddress(host: "127.0.0.1", port: port),
                timeout: .seconds(5),
                tls: try Self.client(
                    ca: certificates.caFile,
                    certificate: certificates.expiredClientCertificate,
                    key: certificates.expiredClientKey
                )
            )
            _ = try Self.roundTrip(.ping, on: connection)
        } catch {
            refused = true
        }
        #expect(refused, "a client with an expired certificate was served")
        #expect(Self.logs(node, "certificate has expired"), "\(node.log.suffix(800))")
    }

    @Test func aRequiredClientCertificateIsChecked() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let (node, tlsPort) = try Self.node(
            certificates,
            ["--tls-ca", certificates.caFile, "--tls-client-auth", "required"]
        )
        let address = CachetAddress(host: "127.0.0.1", port: tlsPort)
        // With its certificate: served.
        let mutual = try CachetBlockingConnection(
            to: address,
            timeout: .seconds(5),
            tls: try Self.client(
                ca: certificates.caFile,
                certificate: certificates.clientCertificate,
                key: certificates.clientKey
            )
        )
        #expect(try Self.roundTrip(.ping, on: mutual).status == .ok)
        // Without: the node refuses the handshake (with TLS 1.3 the client learns it at its first read).
        var refused = false
        do {
            let anonymous = try CachetBlockingConnection(
                to: address,
                timeout: .seconds(5),
                tls: try Self.client(ca: certificates.caFile)
            )
            _ = try Self.roundTrip(.ping, on: anonymous)
        } catch {
            refused = true
        }
        #expect(refused, "a client without a certificate was served")
        #expect(Self.logs(node, "TLS handshake failed"), "\(node.log.suffix(800))")
    }

    @Test func aHandshakeThatNeverStartsIsClosedAtItsDeadline() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let (node, tlsPort) = try Self.node(certificates, ["--tls-handshake-timeout", "0.5"])
        let silent = try TestSocket(port: tlsPort, timeout: 5)
        let started = Date()
        #expect(silent.waitForClose(), "the node closed the silent connection")
        #expect(Date().timeIntervalSince(started) < 4)
        #expect(Self.logs(node, "TLS handshake did not finish in time"))
    }

    @Test func SIGHUPReadsTheCertificateAgain() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        // The node's files are copies that the test replaces.
        let certificate = certificates.directory.appending("live.pem")
        let key = certificates.directory.appending("live.key")
        try FileManager.default.copyItem(atPath: certificates.serverCertificate, toPath: certificate)
        try FileManager.default.copyItem(atPath: certificates.serverKey, toPath: key)
        let tlsPort = try Self.freePort()
        let node = try NodeProcess(arguments: [
            "--tls-port", "\(tlsPort)", "--tls-cert", certificate, "--tls-key", key, "--log-level", "info",
        ])
        let address = CachetAddress(host: "127.0.0.1", port: tlsPort)
        _ = try CachetBlockingConnection(
            to: address,
            timeout: .seconds(5),
            tls: try Self.client(ca: certificates.caFile)
        )
        for (source, target) in [
            (certificates.otherServerCertificate, certificate), (certificates.otherServerKey, key),
        ] {
            try FileManager.default.removeItem(atPath: target)
            try FileManager.default.copyItem(atPath: source, toPath: target)
        }
        kill(node.process.processIdentifier, SIGHUP)
        #expect(Self.logs(node, "TLS certificate and key read again"))
        let renewed = try CachetBlockingConnection(
            to: address,
            timeout: .seconds(5),
            tls: try Self.client(ca: certificates.otherCAFile)
        )
        #expect(try Self.roundTrip(.ping, on: renewed).status == .ok)
    }

    @Test func unreadableFilesStopTheNodeAtStartSayingWhy() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        #expect(throws: (any Error).self) {
            _ = try NodeProcess(
                arguments: [
                    "--tls-port", "0", "--tls-cert", certificates.serverCertificate,
                    "--tls-key", certificates.clientKey,
                ],
                timeout: 5
            )
        }
    }

    /// A TLS-only cluster (`--tls-only`, `--tls-client-auth required`): members forward to each other over
    /// mutual TLS, so a key owned by n2 written through n1 is read back through n3; a plain client on a
    /// member's port is closed.
    /// A member renews what it presents to its peers on SIGHUP: its certificate (here, moved to another CA)
    /// and its peer secret. Its peer restarts with the new files only; the member's new connections to it
    /// must carry the new certificate and secret, or the peer refuses them and writes never reach it.
    @Test func SIGHUPRenewsWhatAMemberPresentsToItsPeers() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let directory = certificates.directory
        func install(certificate: String, key: String, ca: String, peerSecret: String) throws {
            for (from, to) in [(certificate, "node.pem"), (key, "node.key"), (ca, "cluster-ca.pem")] {
                try? FileManager.default.removeItem(atPath: directory.appending(to))
                try FileManager.default.copyItem(atPath: from, toPath: directory.appending(to))
            }
            try NodeAuthTests.writeAuthFile(
                directory.appending("users.json"),
                [("shop", "shop-secret-0123456789", "write", []), ("member", peerSecret, "peer", [])]
            )
            try Data((peerSecret + "\n").utf8).write(to: URL(fileURLWithPath: directory.appending("member.secret")))
        }
        try install(
            certificate: certificates.serverCertificate,
            key: certificates.serverKey,
            ca: certificates.caFile,
            peerSecret: "member-secret-0123456789"
        )
        let ports = try (0..<2).map { _ in try Self.freePort() }
        let file = directory.appending("cluster.json")
        let entries = ports.enumerated().map { "{\"id\": \"n\($0 + 1)\", \"host\": \"127.0.0.1\", \"port\": \($1)}" }
        try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}\n").utf8).write(
            to: URL(fileURLWithPath: file)
        )
        let membership = try CachetMembership(contentsOfFile: file)
        func start(_ index: Int) throws -> NodeProcess {
            try NodeProcess(arguments: [
                "--cluster", file, "--node-id", "n\(index)", "--port", "\(ports[index - 1])", "--tls-only",
                "--tls-cert", directory.appending("node.pem"), "--tls-key", directory.appending("node.key"),
                "--tls-ca", directory.appending("cluster-ca.pem"), "--tls-client-auth", "required",
                "--auth-file", directory.appending("users.json"), "--peer-user", "member",
                "--peer-secret-file", directory.appending("member.secret"), "--probe-interval", "0.1",
                "--disk-limit", "0", "--log-level", "info",
            ])
        }
        let n1 = try start(1)
        var n2 = try start(2)
        let keys: [String] = Array((0..<1000).map { "r\($0)" }.filter { membership.owner(of: $0).id == "n2" }.prefix(2))
        func writeThroughN1(_ key: String, certificate: String, key clientKey: String, ca: String) throws -> Bool {
            let deadline = Date().addingTimeInterval(15)
            while Date() < deadline {
                if let connection = try? CachetBlockingConnection(
                    to: CachetAddress(host: "127.0.0.1", port: ports[0]),
                    timeout: .seconds(5),
                    tls: try Self.client(ca: ca, certificate: certificate, key: clientKey)
                ),
                    (try? Self.roundTrip(
                        .auth(user: Array("shop".utf8), secret: Array("shop-secret-0123456789".utf8)),
                        on: connection
                    ).status) == .ok,
                    (try? Self.roundTrip(.put(key: Array(key.utf8), value: [1], ttl: 0), on: connection).status) == .ok
                {
                    return true
                }
                Thread.sleep(forTimeInterval: 0.1)
            }
            return false
        }
        #expect(
            try writeThroughN1(
                keys[0],
                certificate: certificates.clientCertificate,
                key: certificates.clientKey,
                ca: certificates.caFile
            )
        )
        // Renewal: another CA, another certificate, another peer secret; n1 is told with SIGHUP, n2 restarts.
        try install(
            certificate: certificates.otherServerCertificate,
            key: certificates.otherServerKey,
            ca: certificates.otherCAFile,
            peerSecret: "renewed-member-secret-0123456789"
        )
        kill(n1.process.processIdentifier, SIGHUP)
        #expect(Self.logs(n1, "peer secret read again") && Self.logs(n1, "TLS certificate and key read again"))
        #expect(n2.stop(signal: SIGKILL) != nil)
        n2 = try start(2)
        #expect(
            try writeThroughN1(
                keys[1],
                certificate: certificates.otherServerCertificate,
                key: certificates.otherServerKey,
                ca: certificates.otherCAFile
            ),
            "n1 reached the restarted n2: \(n1.log.suffix(1200))"
        )
        #expect(!n1.log.contains("refused this member's peer credential"))
    }

    @Test func aTLSOnlyClusterForwardsOverMutualTLS() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let ports = try (0..<3).map { _ in try Self.freePort() }
        let file = certificates.directory.appending("cluster.json")
        let entries = ports.enumerated().map { "{\"id\": \"n\($0 + 1)\", \"host\": \"127.0.0.1\", \"port\": \($1)}" }
        try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}\n").utf8).write(
            to: URL(fileURLWithPath: file)
        )
        let membership = try CachetMembership(contentsOfFile: file)
        let nodes = try (1...3).map { index in
            try NodeProcess(arguments: [
                "--cluster", file, "--node-id", "n\(index)", "--port", "\(ports[index - 1])", "--tls-only",
                "--tls-cert", certificates.serverCertificate, "--tls-key", certificates.serverKey,
                "--tls-ca", certificates.caFile, "--tls-client-auth", "required", "--probe-interval", "0.1",
                "--disk-limit", "0", "--log-level", "info",
            ])
        }
        let key = (0...).lazy.map { "m\($0)" }.first { membership.owner(of: $0).id == "n2" }!
        let client = try Self.client(
            ca: certificates.caFile,
            certificate: certificates.clientCertificate,
            key: certificates.clientKey
        )
        func connect(_ index: Int) throws -> CachetBlockingConnection {
            try CachetBlockingConnection(
                to: CachetAddress(host: "127.0.0.1", port: ports[index]),
                timeout: .seconds(5),
                tls: client
            )
        }
        let n1 = try connect(0)
        var written = false
        let deadline = Date().addingTimeInterval(15)
        while !written && Date() < deadline {
            written =
                try Self.roundTrip(.put(key: Array(key.utf8), value: Array("over tls".utf8), ttl: 0), on: n1).status
                == .ok
            if !written { Thread.sleep(forTimeInterval: 0.1) }
        }
        #expect(written, "the write through n1 reached n2")
        #expect(try Self.roundTrip(.get(key: Array(key.utf8)), on: try connect(2)).body == Array("over tls".utf8))
        // n2 holds it itself (a GET with `forwarded` is served from its own store): the forward went over TLS.
        let direct = try Self.roundTrip(.get(key: Array(key.utf8)), on: try connect(1), flags: .forwarded)
        #expect(direct.body == Array("over tls".utf8))
        // Plain text on a member's port: closed, and logged.
        let plain = try TestSocket(port: ports[0], timeout: 5)
        try plain.send(CachetCommand.ping.encoded(id: 1))
        #expect(plain.waitForClose())
        #expect(Self.logs(nodes[0], "TLS handshake failed"))

        // Failover over TLS: n2 is killed; a write of its key through n1 goes to the stand-in, over mutual
        // TLS, and is read back through n3; never the value n2 had.
        #expect(nodes[1].stop(signal: SIGKILL) != nil)
        var failedOver = false
        let failoverBy = Date().addingTimeInterval(15)
        while !failedOver && Date() < failoverBy {
            let connection = try connect(0)
            failedOver =
                (try? Self.roundTrip(.put(key: Array(key.utf8), value: Array("stood in".utf8), ttl: 0), on: connection)
                    .status) == .ok
            if !failedOver { Thread.sleep(forTimeInterval: 0.1) }
        }
        #expect(failedOver, "a write of the dead owner's key was taken by its stand-in over TLS")
        let read = try Self.roundTrip(.get(key: Array(key.utf8)), on: try connect(2))
        #expect(read.status == .ok && read.body == Array("stood in".utf8), "\(read.status) \(read.bodyText)")
    }
}
