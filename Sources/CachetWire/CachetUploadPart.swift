/// One part of a value sent in parts: what follows the key in a PUT with the ``CachetRequestFlags/part``
/// flag (`Protocol/PROTOCOL.md`, "PUT in parts"): `upload: u64 | total: u64 | offset: u64 | bytes`.
///
/// The client picks the upload's id (at random, so that two clients' uploads of one key never share one),
/// sends the value's parts in order on one connection, each `offset` where the previous part ended; the
/// value is stored once the part that reaches `total` has arrived.
public struct CachetUploadPart: Hashable, Sendable {
    /// The upload's id, chosen by the client.
    public var upload: UInt64
    /// The value's whole length.
    public var total: UInt64
    /// Where this part's bytes go in the value.
    public var offset: UInt64
    /// The part's bytes: their offsets in the buffer decoded from.
    public var bytes: Range<Int>

    /// Bytes before the part's own: id, length and offset.
    public static let headerSize = 24

    /// A part located in a buffer.
    public init(upload: UInt64, total: UInt64, offset: UInt64, bytes: Range<Int>) {
        self.upload = upload
        self.total = total
        self.offset = offset
        self.bytes = bytes
    }

    /// Whether this part's bytes end the value.
    public var isLast: Bool { offset + UInt64(bytes.count) == total }

    /// Parses the value field of a PUT with the ``CachetRequestFlags/part`` flag.
    /// - Parameters:
    ///   - buffer: the buffer the frame was decoded from.
    ///   - value: the PUT's value field (``CachetPutBody/value``).
    /// - Throws: ``CachetWireError`` `malformedBody` when the field is shorter than its 24 bytes of id,
    ///   length and offset, or the part runs past the length.
    public static func decode(in buffer: UnsafeRawBufferPointer, value: Range<Int>) throws(CachetWireError)
        -> CachetUploadPart
    {
        guard value.count >= headerSize else {
            throw CachetWireError(
                code: .malformedBody,
                message:
                    "PUT of a part: \(value.count) bytes after the key, fewer than the 24 of upload id, length and offset"
            )
        }
        let part = CachetUploadPart(
            upload: buffer.loadUnaligned(fromByteOffset: value.lowerBound, as: UInt64.self).bigEndian,
            total: buffer.loadUnaligned(fromByteOffset: value.lowerBound + 8, as: UInt64.self).bigEndian,
            offset: buffer.loadUnaligned(fromByteOffset: value.lowerBound + 16, as: UInt64.self).bigEndian,
            bytes: (value.lowerBound + headerSize)..<value.upperBound
        )
        guard part.offset <= part.total, UInt64(part.bytes.count) <= part.total - part.offset else {
            throw CachetWireError(
                code: .malformedBody,
                message:
                    "PUT of a part: \(part.bytes.count) bytes at offset \(part.offset) run past the value's length \(part.total)"
            )
        }
        return part
    }

    /// What a PUT with both the `part` and the `lease` flag is answered (BAD_REQUEST).
    public static let leasedPartError = CachetWireError(
        code: .malformedBody,
        message: "a PUT of a part takes no lease token"
    )

    /// The 24 bytes before a part's own.
    public static func encodeHeader(upload: UInt64, total: UInt64, offset: UInt64) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(headerSize)
        CachetFrameEncoder.appendBigEndian(upload, to: &bytes)
        CachetFrameEncoder.appendBigEndian(total, to: &bytes)
        CachetFrameEncoder.appendBigEndian(offset, to: &bytes)
        return bytes
    }
}
