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
    public static let ok = CachetStatus(rawValue: 0)
    /// GET or DEL of a key that is not stored (or has expired).
    public static let notFound = CachetStatus(rawValue: 1)
    /// The request contradicts its own lengths, has an empty key or a non-empty body where none belongs.
    public static let badRequest = CachetStatus(rawValue: 2)
    /// A frame, key or value exceeds a limit of the node.
    public static let tooLarge = CachetStatus(rawValue: 3)
    /// The opcode is not one this protocol version defines.
    public static let unknownOpcode = CachetStatus(rawValue: 4)
    /// The request's version byte is not 1.
    public static let unsupportedVersion = CachetStatus(rawValue: 5)
    /// The node failed while serving a valid request.
    public static let serverError = CachetStatus(rawValue: 6)
    /// The node cannot serve the request now (shutting down, overloaded, owner unreachable).
    public static let unavailable = CachetStatus(rawValue: 7)

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
        default: return "STATUS_\(rawValue)"
        }
    }
}
