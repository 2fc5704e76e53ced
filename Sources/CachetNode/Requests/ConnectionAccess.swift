import CachetAuth

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
