public import CachetWire

/// What a user may do (`docs/security.md`).
public enum CachetRole: String, Sendable, Hashable, CaseIterable {
    /// GET and PING, of the keys its prefixes allow, and STATS without the cluster's member list.
    case read
    /// As `read`, and PUT and DEL.
    case write
    /// Everything: CLEAR, STATS with the member list, the `cluster` flag (cluster-wide CLEAR and STATS).
    case admin
    /// A cluster member (its `--peer-user`): everything, the node-to-node flags included. Its forwards
    /// carry requests the forwarding member has already checked against their client's user.
    case peer
}

/// An authenticated user: its name, role and the key prefixes it may touch (empty: every key).
public struct CachetPrincipal: Sendable, Hashable {
    /// The user's name.
    public let name: String
    /// Its role.
    public let role: CachetRole
    /// The key prefixes it may touch; empty for every key.
    public let prefixes: [[UInt8]]

    /// A principal.
    /// - Parameters:
    ///   - name: the user's name.
    ///   - role: its role.
    ///   - prefixes: the key prefixes it may touch; empty for every key.
    public init(name: String, role: CachetRole, prefixes: [[UInt8]] = []) {
        self.name = name
        self.role = role
        self.prefixes = prefixes
    }

    /// Whether the user may send a request: its opcode by role, its key by prefix, and never a node's own
    /// flags (`forwarded`: a client that sets it would skip the checks its forwarding node makes). Which
    /// keys a CLEAR may remove is ``clearScope(requested:)``'s to say.
    /// - Parameters:
    ///   - opcode: the request's opcode.
    ///   - flags: its flags word.
    ///   - key: its key (nil for requests without one).
    /// - Returns: nil when allowed, else why not (for a FORBIDDEN reply).
    public func refusal(opcode: CachetOpcode, flags: UInt16, key: UnsafeRawBufferPointer?) -> String? {
        if role == .peer { return nil }
        if flags & CachetRequestFlags.forwarded.rawValue != 0 {
            return "user \(name) may not send node-to-node requests (the forwarded flag)"
        }
        switch opcode {
        case .get, .ping, .watch, .unwatch:
            // WATCH's key is its prefix: a user limited to prefixes watches only under them.
            break
        case .stats:
            // Any user may read the counters; the member list and cluster-wide STATS are an admin's.
            break
        case .put, .delete:
            guard role != .read else { return "user \(name) may only read (role read)" }
        case .clear:
            // Which keys it may clear is ``clearScope(requested:)``'s to say, from the CLEAR's body.
            guard role == .admin else { return "\(opcode) needs the admin role; user \(name) has \(role.rawValue)" }
        default:
            return "user \(name) may not send \(opcode)"
        }
        if flags & CachetRequestFlags.cluster.rawValue != 0 && role != .admin {
            return "cluster-wide requests need the admin role; user \(name) has \(role.rawValue)"
        }
        guard let key, !prefixes.isEmpty else { return nil }
        for prefix in prefixes where key.count >= prefix.count {
            if prefix.withUnsafeBytes({ $0.elementsEqual(key.prefix(prefix.count)) }) { return nil }
        }
        return "user \(name) may only touch keys that start with "
            + prefixes.map { "'\(String(decoding: $0, as: UTF8.self))'" }.joined(separator: ", ")
    }
}

extension CachetPrincipal {
    /// The key prefixes a CLEAR by this user removes, or why it may not: a user limited to prefixes clears
    /// only keys under them (all of them for a CLEAR without prefixes; those it names, when each lies within
    /// one of them); any other user clears what it asks (every key for a CLEAR without prefixes). Call only
    /// for a user ``refusal(opcode:flags:key:)`` allows to CLEAR.
    /// - Parameter requested: the prefixes the CLEAR names (its body), empty for every key.
    /// - Returns: the prefixes to clear (empty: every key), or the reason for a FORBIDDEN reply.
    public func clearScope(requested: [[UInt8]]) -> Result<[[UInt8]], CachetAuthRefusal> {
        guard !prefixes.isEmpty, role != .peer else { return .success(requested) }
        guard !requested.isEmpty else { return .success(prefixes) }
        for prefix in requested where !prefixes.contains(where: { prefix.starts(with: $0) }) {
            return .failure(
                CachetAuthRefusal(
                    message: "user \(name) may only clear keys that start with "
                        + prefixes.map { "'\(String(decoding: $0, as: UTF8.self))'" }.joined(separator: ", ")
                        + "; '\(String(decoding: prefix, as: UTF8.self))' is wider"
                )
            )
        }
        return .success(requested)
    }
}

/// Why a user may not do what it asked: the message of a FORBIDDEN reply.
public struct CachetAuthRefusal: Error, Sendable, Hashable {
    /// What to tell the client.
    public let message: String
}

/// Failed authentications per address, so that a client guessing secrets is slowed to a few tries a
/// minute whatever number of connections it opens: past `maximumFailures` within `window` seconds, an
/// address's attempts are refused without being checked until the window has passed since its first
/// failure. Bounded: it forgets the oldest address past `maximumAddresses`. Pure: the caller passes the
/// time, and keeps it under a lock of its own.
public struct CachetAuthFailureLimiter: Sendable {
    /// Failures an address may make within a window.
    public let maximumFailures: Int
    /// The window, in seconds.
    public let window: UInt64
    /// Addresses remembered at most.
    public let maximumAddresses: Int
    private var failures: [String: (since: UInt64, count: Int)] = [:]

    /// A limiter.
    /// - Parameters:
    ///   - maximumFailures: failures an address may make within `window` (default 10).
    ///   - window: seconds (default 60).
    ///   - maximumAddresses: addresses remembered at most (default 10,000).
    public init(maximumFailures: Int = 10, window: UInt64 = 60, maximumAddresses: Int = 10_000) {
        self.maximumFailures = max(1, maximumFailures)
        self.window = window
        self.maximumAddresses = max(1, maximumAddresses)
    }

    /// Whether `address` may try now.
    /// - Parameters:
    ///   - address: the client's address.
    ///   - now: seconds on any clock that moves forward.
    public func allows(_ address: String, now: UInt64) -> Bool {
        guard let entry = failures[address], now &- entry.since < window else { return true }
        return entry.count < maximumFailures
    }

    /// Records a failed attempt from `address`.
    /// - Parameters:
    ///   - address: the client's address.
    ///   - now: seconds on the same clock.
    public mutating func recordFailure(_ address: String, now: UInt64) {
        if var entry = failures[address], now &- entry.since < window {
            entry.count += 1
            failures[address] = entry
            return
        }
        if failures[address] == nil && failures.count >= maximumAddresses {
            // The address whose window started first goes.
            if let oldest = failures.min(by: { $0.value.since < $1.value.since })?.key { failures[oldest] = nil }
        }
        failures[address] = (now, 1)
    }

    /// Addresses remembered now.
    public var addressCount: Int { failures.count }
}
