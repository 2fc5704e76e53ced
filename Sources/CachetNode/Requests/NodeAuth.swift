import CachetAuth
import CachetLocking
import Dispatch

/// The node's users (`--auth-file`, `docs/security.md`): the table read from the file (again on SIGHUP)
/// and the limit on failed attempts per client address, shared by every loop. Thread-safe: each behind
/// its own lock, taken only by AUTH requests.
final class NodeAuth: Sendable {
    /// The auth file.
    let path: String
    private let table: CachetLock<CachetAuthTable>
    private let limiter = CachetLock(CachetAuthFailureLimiter())

    /// Reads the auth file.
    /// - Parameter path: the file.
    /// - Throws: ``CachetNodeError`` `invalidConfiguration` naming the file and the user at fault.
    init(path: String) throws(CachetNodeError) {
        self.path = path
        do throws(CachetAuthError) {
            table = CachetLock(try CachetAuthTable(contentsOfFile: path))
        } catch {
            throw CachetNodeError(code: .invalidConfiguration, message: error.message)
        }
    }

    /// Reads the file again: connections authenticated before keep their user; AUTH from now on uses the
    /// new table. A file that cannot be read leaves the previous table in force.
    /// - Returns: the users' count, or why the file was refused.
    func reload() -> Result<Int, CachetAuthError> {
        do throws(CachetAuthError) {
            let fresh = try CachetAuthTable(contentsOfFile: path)
            table.withLock { $0 = fresh }
            return .success(fresh.userNames.count)
        } catch {
            return .failure(error)
        }
    }

    /// What an AUTH request comes to.
    enum Outcome {
        /// The user and secret match.
        case authenticated(CachetPrincipal)
        /// They do not (an unknown user or a wrong secret: the reply does not say which).
        case refused
        /// The address failed too often lately: not checked.
        case blocked
    }

    /// Checks `user` and `secret` for a client at `address`, counting a failure against the address.
    func authenticate(user: String, secret: [UInt8], address: String) -> Outcome {
        let now = DispatchTime.now().uptimeNanoseconds / 1_000_000_000
        guard limiter.withLock({ $0.allows(address, now: now) }) else { return .blocked }
        let table = table.withLock { $0 }
        if let principal = table.authenticate(user: user, secret: secret) { return .authenticated(principal) }
        limiter.withLock { $0.recordFailure(address, now: now) }
        return .refused
    }
}

/// What a connection may send: everything on a node without an auth file; on a node with one, only AUTH
/// until it has authenticated, then what its user's role and prefixes allow. Kept by the connection,
/// passed to ``RequestProcessor/process(input:output:outputLimit:outputCapacityLimit:now:access:directSend:requestLimit:)``.
struct ConnectionAccess {
    /// Where the connection stands.
    enum State {
        /// The node has no auth file.
        case open
        /// Not authenticated yet.
        case anonymous
        /// Authenticated as this user.
        case user(CachetPrincipal)
    }

    var state: State
    /// The client's address, for the limit on failed attempts.
    let address: String
    /// Failed AUTHs on this connection: the third closes it.
    var failures = 0
    /// The connection must close once the replies so far are sent (its third failed AUTH).
    var closeRequested = false

    /// Failed AUTHs after which the connection is closed.
    static let failuresBeforeClosing = 3

    /// A node without an auth file: everything allowed.
    static let open = ConnectionAccess(state: .open, address: "")

    /// Whether STATS may list the cluster's members: on a node without users, or to an admin.
    var mayReadMembers: Bool {
        switch state {
        case .open: return true
        case .anonymous: return false
        case .user(let principal): return principal.role == .admin || principal.role == .peer
        }
    }

    /// The key prefixes a CLEAR from this connection removes (empty: every key): its user's, when it is
    /// limited to prefixes (``CachetPrincipal/clearScope(requested:)``; a CLEAR it may not send has been
    /// refused before this is asked).
    /// - Parameter requested: the prefixes the CLEAR names.
    func clearScope(requested: [[UInt8]]) -> [[UInt8]] {
        guard case .user(let principal) = state, case .success(let scope) = principal.clearScope(requested: requested)
        else { return requested }
        return scope
    }

    /// Whether the node has no auth file (the one test every request pays then).
    @inline(__always)
    var isOpen: Bool {
        if case .open = state { return true }
        return false
    }
}
