/// The part of a value a GET with the ``CachetRequestFlags/range`` flag asks for (`Protocol/PROTOCOL.md`,
/// "GET of a range"): `length` bytes from `offset`, or every byte from `offset` to the end. On the wire it
/// follows the GET's key: `offset: u64 | length: u64`, big-endian, `length` ``CachetValueRange/toEnd``
/// (`0xffff_ffff_ffff_ffff`) for "to the end".
///
/// A range that starts past the value's end cannot be served (RANGE_NOT_SATISFIABLE, with the value's
/// length); one that starts inside it, or exactly at its end, is served, its end held at the value's end
/// (as HTTP ranges are), so an empty range is valid.
public struct CachetValueRange: Hashable, Sendable, CustomStringConvertible {
    /// The first byte's offset in the value.
    public var offset: UInt64
    /// How many bytes, at most; ``toEnd`` for every byte to the end.
    public var length: UInt64

    /// The `length` that means "to the end of the value".
    public static let toEnd = UInt64.max

    /// Bytes a range takes on the wire after the key.
    public static let encodedSize = 16

    /// - Parameters:
    ///   - offset: the first byte's offset in the value.
    ///   - length: how many bytes at most; ``toEnd`` (the default) for every byte to the end.
    public init(offset: UInt64, length: UInt64 = CachetValueRange.toEnd) {
        self.offset = offset
        self.length = length
    }

    /// The range of byte offsets `range` covers.
    /// - Parameter range: offsets in the value.
    public init(_ range: Range<Int>) {
        self.init(offset: UInt64(max(0, range.lowerBound)), length: UInt64(max(0, range.count)))
    }

    /// The bytes of a value of `total` bytes this range selects, its end held at the value's end; nil when
    /// it starts past the end.
    /// - Parameter total: the value's length.
    @inlinable
    public func bounds(total: Int) -> Range<Int>? {
        guard offset <= UInt64(total) else { return nil }
        let start = Int(offset)
        let available = total - start
        let count = length >= UInt64(available) ? available : Int(length)
        return start..<(start + count)
    }

    /// The 16 bytes that follow the key on the wire.
    public var encoded: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.encodedSize)
        CachetFrameEncoder.appendBigEndian(offset, to: &bytes)
        CachetFrameEncoder.appendBigEndian(length, to: &bytes)
        return bytes
    }

    /// `offset-end` (`offset-` to the end), as in messages.
    public var description: String {
        length == Self.toEnd ? "\(offset)-" : "\(offset)-\(offset &+ length &- 1) (\(length) bytes)"
    }

    /// Bytes before the range's bytes in an OK reply: the value's length and its tag.
    public static let replyPrefixSize = 16

    /// Reads an OK reply's body to a GET of a range: the value's whole length and its tag, then the range's
    /// bytes; or a RANGE_NOT_SATISFIABLE reply's body, which ends after the tag.
    ///
    /// The tag is a 64-bit checksum of the whole value (CRC-32 and Adler-32), the same on every node and in
    /// either tier: a reader of several ranges compares it to tell that the value was replaced between them.
    /// - Parameter body: the reply's body.
    /// - Returns: the value's length and tag and where the bytes start in `body`; nil for a body shorter than
    ///   16 bytes.
    public static func decodeReply(_ body: some Collection<UInt8>) -> (total: UInt64, tag: UInt64, sliceStart: Int)? {
        guard body.count >= replyPrefixSize else { return nil }
        var total: UInt64 = 0
        var tag: UInt64 = 0
        for (index, byte) in body.prefix(replyPrefixSize).enumerated() {
            if index < 8 { total = total << 8 | UInt64(byte) } else { tag = tag << 8 | UInt64(byte) }
        }
        return (total, tag, replyPrefixSize)
    }
}
