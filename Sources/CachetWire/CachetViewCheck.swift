/// A member's question to a peer about a third member it marked down after its requests timed out
/// (`Protocol/CLUSTER.md`, "Health"): does the peer still route to it? Timeouts may be this member's own
/// trouble (a connection still stalled after a partition healed) while the others reach that member; a
/// member stands in for another's keys only once a majority of the members, itself counted, see it down.
/// A PING with ``CachetRequestFlags/forwarded`` and ``CachetRequestFlags/viewCheck`` whose body is the id
/// asked about (UTF-8, at least one byte); the OK reply's body is one byte, an ``Answer``.
public struct CachetViewCheck: Hashable, Sendable {
    /// The id of the member asked about.
    public var memberID: String

    /// A peer's answer: one byte.
    public struct Answer: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The byte on the wire.
        public var rawValue: UInt8

        /// - Parameter rawValue: the byte on the wire; values not listed here are read as "routes there".
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// `0`: the peer routes to the member (up or suspect in its view).
        public static let routesThere = Answer(rawValue: 0)
        /// `1`: the peer sees the member down too.
        public static let down = Answer(rawValue: 1)
        /// `2`: the member is not in the peer's membership, or is the peer itself.
        public static let unknown = Answer(rawValue: 2)

        /// The answer's name.
        public var description: String {
            switch self {
            case .routesThere: return "routesThere"
            case .down: return "down"
            case .unknown: return "unknown"
            default: return "unknown(\(rawValue))"
            }
        }
    }

    /// - Parameter memberID: the id of the member asked about.
    public init(memberID: String) {
        self.memberID = memberID
    }

    /// The request frame: a PING with `forwarded` and `viewCheck`.
    /// - Parameter id: the request id.
    /// - Returns: the frame's bytes.
    public func encoded(id: UInt32) -> [UInt8] {
        CachetCommand.peerPing(flags: [.forwarded, .viewCheck], body: Array(memberID.utf8), id: id)
    }

    /// Reads a view check's body.
    /// - Parameters:
    ///   - buffer: the bytes holding the frame.
    ///   - body: the body's range in `buffer`.
    /// - Returns: the check.
    /// - Throws: ``CachetWireError`` (`malformedBody`) for an empty body.
    public static func decode(
        in buffer: UnsafeRawBufferPointer,
        body: Range<Int>
    ) throws(CachetWireError) -> CachetViewCheck {
        guard !body.isEmpty else {
            throw CachetWireError(code: .malformedBody, message: "view check body is empty: it names a member id")
        }
        let id = String(decoding: UnsafeRawBufferPointer(rebasing: buffer[body]), as: UTF8.self)
        return CachetViewCheck(memberID: id)
    }
}
