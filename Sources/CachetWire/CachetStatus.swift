/// The outcome of a request, carried in every response header.
///
/// A `RawRepresentable` struct so that a status added by a later protocol version is still readable
/// by an older client. See `Protocol/PROTOCOL.md`, "Status codes".
public struct CachetStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The status on the wire.
    public var rawValue: UInt16

    /// Creates a status from its wire value; any value is representable.
    /// - Parameter rawValue: the 16-bit status.
    @inlinable
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// The request succeeded.
    @inlinable public static var ok: CachetStatus { CachetStatus(rawValue: 0) }
    /// GET or DEL of a key that is not stored (or has expired).
    @inlinable public static var notFound: CachetStatus { CachetStatus(rawValue: 1) }
    /// The request contradicts its own lengths, has an empty key or a non-empty body where none belongs.
    @inlinable public static var badRequest: CachetStatus { CachetStatus(rawValue: 2) }
    /// A frame, key or value exceeds a limit of the node.
    @inlinable public static var tooLarge: CachetStatus { CachetStatus(rawValue: 3) }
    /// The opcode is not one this protocol version defines.
    @inlinable public static var unknownOpcode: CachetStatus { CachetStatus(rawValue: 4) }
    /// The request's version byte is not 1.
    @inlinable public static var unsupportedVersion: CachetStatus { CachetStatus(rawValue: 5) }
    /// The node failed while serving a valid request.
    @inlinable public static var serverError: CachetStatus { CachetStatus(rawValue: 6) }
    /// The node cannot serve the request now (shutting down, overloaded, owner unreachable).
    @inlinable public static var unavailable: CachetStatus { CachetStatus(rawValue: 7) }
    /// The node requires AUTH first, or the user and secret given do not match.
    @inlinable public static var notAuthenticated: CachetStatus { CachetStatus(rawValue: 8) }
    /// The authenticated user may not send this request (its role, or its key prefixes).
    @inlinable public static var forbidden: CachetStatus { CachetStatus(rawValue: 9) }
    /// A PUT with a lease token was not stored: its lease was lost (a DEL, PUT or CLEAR of the key since
    /// it was granted, or it expired), so its value may be older than what the cache was told since.
    @inlinable public static var notStored: CachetStatus { CachetStatus(rawValue: 10) }
    /// A GET with the `range` flag whose offset is past the value's end (`Protocol/PROTOCOL.md`, "GET of a
    /// range"); the body is the value's length (u64).
    @inlinable public static var rangeNotSatisfiable: CachetStatus { CachetStatus(rawValue: 11) }
    /// One frame of a reply sent in several (a GET with the `frames` flag of a value longer than one frame
    /// holds, `Protocol/PROTOCOL.md`, "GET of a value longer than a frame"): the body is the next bytes of the
    /// value, and more frames of the same reply follow; the last one has another status (OK, or an error
    /// that voids the bytes before it).
    @inlinable public static var continues: CachetStatus { CachetStatus(rawValue: 12) }
    /// A PUT with the `item` flag in compare-and-swap mode whose item has another CAS unique: it changed since
    /// the client read it; nothing was stored.
    @inlinable public static var exists: CachetStatus { CachetStatus(rawValue: 13) }

    /// The upper-case name used in the specification, or `STATUS_N` for an unknown value.
    public var description: String {
        switch rawValue {
        case 0: return "OK"
        case 1: return "NOT_FOUND"
        case 2: return "BAD_REQUEST"
        case 3: return "TOO_LARGE"
        case 4: return "UNKNOWN_OPCODE"
        case 5: return "UNSUPPORTED_VERSION"
        case 6: return "SERVER_ERROR"
        case 7: return "UNAVAILABLE"
        case 8: return "NOT_AUTHENTICATED"
        case 9: return "FORBIDDEN"
        case 10: return "NOT_STORED"
        case 11: return "RANGE_NOT_SATISFIABLE"
        case 12: return "CONTINUES"
        case 13: return "EXISTS"
        default: return "STATUS_\(rawValue)"
        }
    }
}
