/// A member's question to a peer while it holds its own keys after an absence (`Protocol/CLUSTER.md`, "The
/// owner's hold"): may the hold end? A PING with ``CachetRequestFlags/forwarded`` and
/// ``CachetRequestFlags/holdCheck`` whose body is `id_len: u16 | id | membership hash` (the member's id and
/// the `cluster_hash` of the membership it reads, both UTF-8). The OK reply's body is one byte, an
/// ``Answer``. The holding member ends its hold early once every peer of its membership answers
/// ``Answer/clear`` to a check sent after the hold started.
public struct CachetHoldCheck: Hashable, Sendable {
    /// The asking member's id.
    public var memberID: String
    /// The `cluster_hash` of the membership the asking member reads.
    public var membershipHash: String

    /// A peer's answer: one byte.
    public struct Answer: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The byte on the wire.
        public var rawValue: UInt8

        /// - Parameter rawValue: the byte on the wire; values not listed here are read as "not clear".
        public init(rawValue: UInt8) { self.rawValue = rawValue }

        /// `0`: the peer routes the member's keys to it and owes it nothing (no write it stood in for is left
        /// to tell): as far as this peer goes, the hold may end.
        public static let clear = Answer(rawValue: 0)
        /// `1`: the peer does not route the member's keys to it yet (it sees the member down, or does not
        /// know it); it probes it now.
        public static let notRoutedHere = Answer(rawValue: 1)
        /// `2`: the peer stood in for the member and has not yet told it everything it wrote.
        public static let owesInvalidations = Answer(rawValue: 2)
        /// `3`: the peer reads another membership than the one named.
        public static let otherMembership = Answer(rawValue: 3)

        /// The answer's name.
        public var description: String {
            switch self {
            case .clear: return "clear"
            case .notRoutedHere: return "notRoutedHere"
            case .owesInvalidations: return "owesInvalidations"
            case .otherMembership: return "otherMembership"
            default: return "unknown(\(rawValue))"
            }
        }
    }

    /// - Parameters:
    ///   - memberID: the asking member's id.
    ///   - membershipHash: the `cluster_hash` of the membership it reads.
    public init(memberID: String, membershipHash: String) {
        self.memberID = memberID
        self.membershipHash = membershipHash
    }

    /// The request frame: a PING with `forwarded` and `holdCheck`.
    /// - Parameter id: the request id.
    /// - Returns: the frame's bytes.
    public func encoded(id: UInt32) -> [UInt8] {
        let idBytes = Array(memberID.utf8.prefix(Int(UInt16.max)))
        var body: [UInt8] = [UInt8(idBytes.count >> 8), UInt8(idBytes.count & 0xff)]
        body += idBytes
        body += membershipHash.utf8
        return CachetCommand.peerPing(flags: [.forwarded, .holdCheck], body: body, id: id)
    }

    /// Reads a hold check's body.
    /// - Parameters:
    ///   - buffer: the bytes holding the frame.
    ///   - body: the body's range in `buffer`.
    /// - Returns: the check.
    /// - Throws: ``CachetWireError`` (`malformedBody`) when the body is shorter than its id length says, or
    ///   the id is empty.
    public static func decode(
        in buffer: UnsafeRawBufferPointer,
        body: Range<Int>
    ) throws(CachetWireError) -> CachetHoldCheck {
        guard body.count >= 2 else {
            throw CachetWireError(
                code: .malformedBody,
                message: "hold check body of \(body.count) bytes is shorter than its 2-byte id length"
            )
        }
        let idLength = Int(buffer.loadUnaligned(fromByteOffset: body.lowerBound, as: UInt16.self).bigEndian)
        let idStart = body.lowerBound + 2
        guard idLength >= 1, idStart + idLength <= body.upperBound else {
            throw CachetWireError(
                code: .malformedBody,
                message: "hold check body declares a \(idLength)-byte member id but carries "
                    + "\(body.upperBound - idStart) bytes after its length (an id is at least 1 byte)"
            )
        }
        let idEnd = idStart + idLength
        return CachetHoldCheck(
            memberID: String(decoding: UnsafeRawBufferPointer(rebasing: buffer[idStart..<idEnd]), as: UTF8.self),
            membershipHash: String(
                decoding: UnsafeRawBufferPointer(rebasing: buffer[idEnd..<body.upperBound]),
                as: UTF8.self
            )
        )
    }
}
