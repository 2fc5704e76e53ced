/// The operation a request asks for, echoed in its response.
///
/// A struct rather than an enum so that a byte the node does not know can still be represented,
/// answered with ``CachetStatus/unknownOpcode``, and echoed back. See `Protocol/PROTOCOL.md`, "Opcodes".
public struct CachetOpcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The opcode byte on the wire.
    public var rawValue: UInt8

    /// Creates an opcode from its wire byte; any byte is representable.
    /// - Parameter rawValue: the opcode byte.
    @inlinable
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Stores a value under a key, with an optional TTL.
    @inlinable public static var put: CachetOpcode { CachetOpcode(rawValue: 0x01) }
    /// Reads the value stored under a key.
    @inlinable public static var get: CachetOpcode { CachetOpcode(rawValue: 0x02) }
    /// Removes a key.
    @inlinable public static var delete: CachetOpcode { CachetOpcode(rawValue: 0x03) }
    /// Removes every entry of the node.
    @inlinable public static var clear: CachetOpcode { CachetOpcode(rawValue: 0x04) }
    /// Asks for the node's counters as a JSON object.
    @inlinable public static var stats: CachetOpcode { CachetOpcode(rawValue: 0x05) }
    /// Asks for an empty OK reply.
    @inlinable public static var ping: CachetOpcode { CachetOpcode(rawValue: 0x06) }
    /// Authenticates the connection as a user of the node's auth file.
    @inlinable public static var auth: CachetOpcode { CachetOpcode(rawValue: 0x07) }
    /// Turns the connection into a stream of ``event`` frames: changes of keys under a prefix
    /// (`Protocol/PROTOCOL.md`, "WATCH").
    @inlinable public static var watch: CachetOpcode { CachetOpcode(rawValue: 0x08) }
    /// Ends a WATCH: the connection answers requests again.
    @inlinable public static var unwatch: CachetOpcode { CachetOpcode(rawValue: 0x09) }
    /// A change a watching connection is sent (never a request).
    @inlinable public static var event: CachetOpcode { CachetOpcode(rawValue: 0x0a) }
    /// The opcode of a reply to a frame that could not be trusted (framing errors); its id is 0 too.
    @inlinable public static var none: CachetOpcode { CachetOpcode(rawValue: 0x00) }

    /// Every opcode that protocol version 1 defines.
    public static let allKnown: [CachetOpcode] = [.put, .get, .delete, .clear, .stats, .ping, .auth, .watch, .unwatch]

    /// Whether protocol version 1 defines this opcode as a request (EVENT is only sent by nodes).
    @inlinable
    public var isKnown: Bool { rawValue >= 0x01 && rawValue <= 0x09 }

    /// The upper-case name used in the specification (`PUT`, `GET`...), or `0xNN` for an unknown byte.
    public var description: String {
        switch rawValue {
        case 0x00: return "NONE"
        case 0x01: return "PUT"
        case 0x02: return "GET"
        case 0x03: return "DEL"
        case 0x04: return "CLEAR"
        case 0x05: return "STATS"
        case 0x06: return "PING"
        case 0x07: return "AUTH"
        case 0x08: return "WATCH"
        case 0x09: return "UNWATCH"
        case 0x0a: return "EVENT"
        default: return "0x" + hex2(rawValue)
        }
    }
}

@usableFromInline
func hex2(_ byte: UInt8) -> String {
    let digits: [Character] = Array("0123456789abcdef")
    return String([digits[Int(byte >> 4)], digits[Int(byte & 0x0f)]])
}
