import COpenSSL

#if canImport(Glibc)
import Glibc
#endif

/// What a TLS endpoint presents and checks (`docs/security.md`): its certificate chain and key, the CA
/// that peers' certificates must chain to, and, on a server, whether clients must present one.
public struct CachetTLSConfiguration: Sendable, Hashable {
    /// Whether a server asks clients for a certificate.
    public enum ClientAuthentication: String, Sendable, Hashable, CaseIterable {
        /// Clients are not asked for a certificate.
        case none
        /// Clients are asked; one that presents a certificate must chain to the CA, one without is accepted.
        case optional
        /// Clients must present a certificate that chains to the CA (mutual TLS).
        case required
    }

    /// A PEM file with the certificate (and its chain), or nil (a client without one).
    public var certificateFile: String?
    /// A PEM file with the certificate's private key.
    public var keyFile: String?
    /// A PEM file with the CA certificates peers must chain to; nil: the system's (a client), or no client
    /// certificates checked (a server).
    public var caFile: String?
    /// On a server: whether clients must present a certificate.
    public var clientAuthentication: ClientAuthentication
    /// On a client: the name the server's certificate must carry (sent as SNI), or nil to check none
    /// (the certificate must still chain to the CA).
    public var serverName: String?

    /// Creates a configuration.
    /// - Parameters:
    ///   - certificateFile: the certificate chain (PEM).
    ///   - keyFile: its private key (PEM).
    ///   - caFile: the CA certificates peers chain to (PEM).
    ///   - clientAuthentication: on a server, whether clients present certificates.
    ///   - serverName: on a client, the name the server's certificate must carry.
    public init(
        certificateFile: String? = nil,
        keyFile: String? = nil,
        caFile: String? = nil,
        clientAuthentication: ClientAuthentication = .none,
        serverName: String? = nil
    ) {
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.caFile = caFile
        self.clientAuthentication = clientAuthentication
        self.serverName = serverName
    }
}

/// An OpenSSL context (`SSL_CTX`) for one side, TLS 1.2 and later only, made from a
/// ``CachetTLSConfiguration``: its files are read once, here (a server that re-reads them on SIGHUP makes a
/// new context; connections keep the one they started with). Thread-safe once made: sessions are created
/// from it on any thread.
public final class CachetTLSContext: @unchecked Sendable {
    /// Which side of the handshake the context's sessions take.
    public enum Role: Sendable, Hashable {
        /// Accepts connections.
        case server
        /// Opens connections.
        case client
    }

    let context: OpaquePointer
    /// The side its sessions take.
    public let role: Role
    /// What it was made from.
    public let configuration: CachetTLSConfiguration

    /// Makes a context, reading the certificate, key and CA files.
    /// - Parameters:
    ///   - role: server or client.
    ///   - configuration: the files and checks.
    /// - Throws: ``CachetIOError`` `tlsConfiguration` naming the file and OpenSSL's reason when a file
    ///   cannot be read or does not match (a key that is not the certificate's, say), or when a server has
    ///   no certificate.
    public init(role: Role, configuration: CachetTLSConfiguration) throws(CachetIOError) {
        guard let context = SSL_CTX_new(role == .server ? TLS_server_method() : TLS_client_method()) else {
            throw Self.failure("cannot create a TLS context")
        }
        self.context = context
        self.role = role
        self.configuration = configuration
        guard cachet_tls_ctx_minimum_tls12(context) == 1 else { throw Self.failure("cannot require TLS 1.2") }
        cachet_tls_ctx_read_ahead(context)
        if role == .server && configuration.certificateFile == nil {
            throw CachetIOError(code: .tlsConfiguration, message: "a TLS server needs a certificate (--tls-cert)")
        }
        if let certificate = configuration.certificateFile {
            guard SSL_CTX_use_certificate_chain_file(context, certificate) == 1 else {
                throw Self.failure("cannot read the certificate \(certificate)")
            }
            let key = configuration.keyFile ?? certificate
            guard SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) == 1 else {
                throw Self.failure("cannot read the private key \(key)")
            }
            guard SSL_CTX_check_private_key(context) == 1 else {
                throw Self.failure("the private key \(key) is not the certificate's (\(certificate))")
            }
        }
        if let ca = configuration.caFile {
            guard SSL_CTX_load_verify_locations(context, ca, nil) == 1 else {
                throw Self.failure("cannot read the CA certificates \(ca)")
            }
        } else if role == .client {
            _ = SSL_CTX_set_default_verify_paths(context)
        }
        switch role {
        case .client:
            SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        case .server:
            switch configuration.clientAuthentication {
            case .none:
                SSL_CTX_set_verify(context, SSL_VERIFY_NONE, nil)
            case .optional:
                SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
            case .required:
                guard configuration.caFile != nil else {
                    throw CachetIOError(
                        code: .tlsConfiguration,
                        message: "client certificates can only be required with a CA to check them (--tls-ca)"
                    )
                }
                SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
            }
        }
    }

    deinit { SSL_CTX_free(context) }

    /// A session for a connected socket, taking this context's side.
    /// - Parameter fd: the socket (the session does not own it).
    /// - Returns: the session, its handshake to come with the first read or write.
    /// - Throws: ``CachetIOError`` when OpenSSL cannot make one (out of memory).
    public func session(for fd: Int32) throws(CachetIOError) -> CachetTLSSession {
        guard let ssl = SSL_new(context) else { throw Self.failure("cannot create a TLS session") }
        SSL_set_fd(ssl, fd)
        cachet_tls_partial_writes(ssl)
        if role == .server {
            SSL_set_accept_state(ssl)
        } else {
            if let name = configuration.serverName {
                _ = cachet_tls_server_name(ssl, name)
                // The certificate must carry the name (a DNS name, or an IP address in the SAN).
                if let param = SSL_get0_param(ssl) {
                    if CachetTLSContext.isIPAddress(name) {
                        _ = X509_VERIFY_PARAM_set1_ip_asc(param, name)
                    } else {
                        _ = X509_VERIFY_PARAM_set1_host(param, name, 0)
                    }
                }
            }
            SSL_set_connect_state(ssl)
        }
        return CachetTLSSession(ssl: ssl, context: self)
    }

    static func isIPAddress(_ name: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, name, &v4) == 1 || inet_pton(AF_INET6, name, &v6) == 1
    }

    static func failure(_ what: String) -> CachetIOError {
        CachetIOError(
            code: .tlsConfiguration,
            message: "\(what): \(CachetTLSSession.takeErrorText() ?? "no reason given")"
        )
    }
}

/// One connection's TLS (an OpenSSL `SSL`): reads and writes that encrypt, with the handshake done by the
/// first of them, each answering as a socket call would (``CachetSocket/IOResult``). Used on one thread at
/// a time (its channel's loop, or the blocking connection's caller).
public final class CachetTLSSession {
    let ssl: OpaquePointer
    /// The context it came from (kept alive with it).
    public let context: CachetTLSContext
    /// What the last call that answered `.wouldBlock` waits for: `POLLIN` or `POLLOUT`.
    public private(set) var waitsFor: Int16 = Int16(POLLIN)
    /// Why the last call that answered `.failed` failed, in OpenSSL's words (a wrong version number for
    /// plain text on a TLS port, a certificate that does not verify...), for the log.
    public private(set) var lastFailure: String?

    init(ssl: OpaquePointer, context: CachetTLSContext) {
        self.ssl = ssl
        self.context = context
    }

    deinit { SSL_free(ssl) }

    /// Whether the handshake is over.
    public var isEstablished: Bool { SSL_is_init_finished(ssl) == 1 }

    /// The protocol in use (`TLSv1.3`...), once established.
    public var protocolVersion: String {
        guard let name = SSL_get_version(ssl) else { return "" }
        return String(validatingCString: name) ?? ""
    }

    /// Advances the handshake as far as the socket allows.
    /// - Returns: `.bytes(0)` once it is over, `.wouldBlock` (see ``waitsFor``), or `.failed` (see
    ///   ``lastFailure``: a certificate that does not verify, a peer that does not speak TLS).
    public func handshake() -> CachetSocket.IOResult {
        let n = SSL_do_handshake(ssl)
        if n == 1 { return .bytes(0) }
        let outcome = settle(n)
        if case .endOfStream = outcome {
            lastFailure = lastFailure ?? "the peer closed the connection during the TLS handshake"
            return .failed(ECONNRESET)
        }
        return outcome
    }

    /// Completes the handshake on a socket, waiting (with `poll`) for it as needed, at most until
    /// `deadline`: for a thread that blocks (a tool, a load generator).
    /// - Parameters:
    ///   - fd: the session's socket.
    ///   - deadline: when to give up.
    ///   - peer: how to name the peer in errors.
    /// - Throws: ``CachetIOError`` `tlsHandshakeFailed` with OpenSSL's reason, or when it takes too long.
    public func completeHandshake(fd: Int32, until deadline: CachetDeadline, peer: String) throws(CachetIOError) {
        while true {
            switch handshake() {
            case .bytes:
                return
            case .wouldBlock:
                guard CachetSocket.wait(fd, for: waitsFor, until: deadline) else {
                    throw CachetIOError(
                        code: .tlsHandshakeFailed,
                        message: "the TLS handshake with \(peer) did not finish within \(deadline.timeout)",
                        systemError: ETIMEDOUT
                    )
                }
            case .endOfStream, .failed:
                throw CachetIOError(
                    code: .tlsHandshakeFailed,
                    message: "the TLS handshake with \(peer) failed: \(lastFailure ?? "no reason given")"
                )
            }
        }
    }

    /// Reads decrypted bytes: what one `recv` brings (OpenSSL reads ahead: as many bytes as the socket
    /// holds, up to its buffer), and what OpenSSL already holds, up to `count`. A short answer does not
    /// mean the socket is drained: a channel using TLS is registered level-triggered, so that epoll
    /// reports it again while it holds bytes.
    /// - Parameters:
    ///   - buffer: where to read to.
    ///   - count: the room in `buffer`.
    /// - Returns: `.bytes` (possibly fewer than `count`), `.wouldBlock`, `.endOfStream` (the peer's
    ///   close_notify or FIN), or `.failed` (see ``lastFailure``).
    @inline(never)
    public func read(into buffer: UnsafeMutableRawPointer, count: Int) -> CachetSocket.IOResult {
        var total = 0
        while total < count {
            let n = SSL_read(ssl, buffer + total, Int32(clamping: count - total))
            if n > 0 {
                total += Int(n)
                // Go on only while OpenSSL holds bytes it read (no `recv` needed for them).
                if SSL_has_pending(ssl) == 0 { break }
                continue
            }
            let outcome = settle(n)
            if total > 0, case .wouldBlock = outcome { break }
            if total > 0 { break }
            return outcome
        }
        return .bytes(total)
    }

    /// Encrypts and sends what the socket takes now.
    /// - Parameter bytes: what to send.
    /// - Returns: `.bytes` (possibly fewer than offered), `.wouldBlock`, or `.failed`.
    @inline(never)
    public func write(_ bytes: UnsafeRawBufferPointer) -> CachetSocket.IOResult {
        guard bytes.count > 0 else { return .bytes(0) }
        let n = SSL_write(ssl, bytes.baseAddress, Int32(clamping: bytes.count))
        if n > 0 { return .bytes(Int(n)) }
        let outcome = settle(n)
        if case .endOfStream = outcome { return .failed(EPIPE) }
        return outcome
    }

    /// Sends close_notify (once), so that the peer can tell the end of the stream from a cut connection.
    public func close() {
        if SSL_is_init_finished(ssl) == 1 { _ = SSL_shutdown(ssl) }
        ERR_clear_error()
    }

    /// Decrypted bytes OpenSSL holds that no read has taken yet.
    public var pending: Int { Int(SSL_pending(ssl)) }

    /// What a call that returned `n` (0 or less) means.
    private func settle(_ n: Int32) -> CachetSocket.IOResult {
        let code = SSL_get_error(ssl, n)
        switch code {
        case SSL_ERROR_WANT_READ:
            waitsFor = Int16(POLLIN)
            return .wouldBlock
        case SSL_ERROR_WANT_WRITE:
            waitsFor = Int16(POLLOUT)
            return .wouldBlock
        case SSL_ERROR_ZERO_RETURN:
            return .endOfStream
        case SSL_ERROR_SYSCALL:
            let system = errno
            let text = Self.takeErrorText()
            if text == nil && (system == 0 || n == 0) { return .endOfStream }
            lastFailure = (text ?? CachetIOError.describe(system)) + verificationFailure
            return .failed(system == 0 ? ECONNRESET : system)
        default:
            lastFailure = (Self.takeErrorText() ?? "TLS error \(code)") + verificationFailure
            return .failed(EPROTO)
        }
    }

    /// Why the peer's certificate did not verify, when it did not ("certificate has expired", "unable to
    /// get local issuer certificate", a name that does not match...), after a colon; else empty. OpenSSL's
    /// error queue only says "certificate verify failed".
    private var verificationFailure: String {
        let result = SSL_get_verify_result(ssl)
        guard result != X509_V_OK, let text = X509_verify_cert_error_string(result) else { return "" }
        return " (\(String(cString: text)))"
    }

    /// OpenSSL's error queue as text (its first entry), emptied; nil when empty.
    static func takeErrorText() -> String? {
        var buffer = [CChar](repeating: 0, count: 256)
        let first = buffer.withUnsafeMutableBufferPointer { cachet_tls_take_error($0.baseAddress, $0.count) }
        guard first != 0 else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
