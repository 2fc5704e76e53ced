import CachetIO
import CachetLocking
import CachetWire

/// What a member presents to its peers: the TLS context of its peer connections (in a TLS-only cluster:
/// its own certificate as the client certificate, the cluster's CA) and the AUTH they send first (in a
/// cluster with users: its `--peer-user`). Both are read again on SIGHUP (``CachetNodeServer/reloadTLS()``,
/// ``CachetNodeServer/reloadAuth()``), so that a renewed certificate or a changed peer secret reaches the
/// peers too; each new peer connection takes the ones in force, open ones keep theirs. Thread-safe.
final class PeerCredentials: Sendable {
    private let current: CachetLock<(tls: CachetTLSContext?, authRequest: [UInt8]?)>

    /// - Parameters:
    ///   - tls: the peer connections' TLS context; nil: plain TCP.
    ///   - authRequest: the AUTH frame they send first; nil: none.
    init(tls: CachetTLSContext?, authRequest: [UInt8]?) {
        current = CachetLock((tls, authRequest))
    }

    /// The AUTH frame for a peer user and its secret.
    static func authRequest(user: String, secret: [UInt8]) -> [UInt8] {
        CachetCommand.auth(user: Array(user.utf8), secret: secret).encoded(id: 0)
    }

    /// The TLS context and AUTH frame a new peer connection uses.
    var inForce: (tls: CachetTLSContext?, authRequest: [UInt8]?) { current.withLock { $0 } }

    /// Replaces the TLS context (after the certificate files were read again).
    func replaceTLS(_ context: CachetTLSContext) { current.withLock { $0.tls = context } }

    /// Replaces the AUTH frame (after the peer secret was read again).
    func replaceAuthRequest(_ request: [UInt8]) { current.withLock { $0.authRequest = request } }
}
