/// Finds whole frames in a byte buffer. Pure: no I/O, no allocation on success.
///
/// The contract follows a single-step decoder: `nil` means the buffer does not yet hold a whole frame
/// (nothing is consumed), a thrown error means the stream is malformed, and a frame says how far to
/// advance. The length limit is checked as soon as the 4-byte prefix has arrived, before anything is
/// buffered for the payload. See `Protocol/PROTOCOL.md`, "Frames".
public enum CachetFrameDecoder {
    /// Decodes the frame at the start of `buffer[offset...]`.
    ///
    /// - Parameters:
    ///   - buffer: bytes received so far.
    ///   - offset: where the next frame starts.
    ///   - maximumPayloadLength: the largest payload accepted (`--max-frame`).
    /// - Returns: the frame, or `nil` when more bytes are needed.
    /// - Throws: ``CachetWireError`` with code `payloadTooShort` or `payloadTooLarge`; both close the
    ///   connection since the stream's framing can no longer be trusted.
    @inlinable
    public static func decodeFrame(
        in buffer: UnsafeRawBufferPointer,
        at offset: Int = 0,
        maximumPayloadLength: Int = CachetProtocol.defaultMaximumPayloadLength
    ) throws(CachetWireError) -> CachetFrame? {
        try decodeFraming(in: buffer, at: offset, maximumPayloadLength: maximumPayloadLength, of: .request)
    }

    /// Which side's frames are being framed: the framing is the same, the error messages are not.
    @usableFromInline
    enum Side {
        /// Requests, read by a node.
        case request
        /// Replies, read by a client (``CachetReplyDecoder``).
        case reply
    }

    /// The framing shared by requests and replies: the length prefix checked as soon as it has arrived,
    /// then the header and the body's range once the whole frame has.
    @inlinable @inline(__always)
    static func decodeFraming(
        in buffer: UnsafeRawBufferPointer,
        at offset: Int,
        maximumPayloadLength: Int,
        of side: Side
    ) throws(CachetWireError) -> CachetFrame? {
        let available = buffer.count - offset
        guard available >= CachetProtocol.lengthPrefixSize else { return nil }
        let length = Int(buffer.loadUnaligned(fromByteOffset: offset, as: UInt32.self).bigEndian)
        guard length >= CachetProtocol.minimumPayloadLength else {
            throw side == .request ? payloadTooShort(length) : CachetReplyDecoder.replyTooShort(length)
        }
        guard length <= maximumPayloadLength else {
            throw side == .request
                ? payloadTooLarge(length, limit: maximumPayloadLength)
                : CachetReplyDecoder.replyTooLarge(length, limit: maximumPayloadLength)
        }
        guard available - CachetProtocol.lengthPrefixSize >= length else { return nil }
        let start = offset + CachetProtocol.lengthPrefixSize
        return CachetFrame(
            header: readHeader(in: buffer, at: start),
            body: (start + CachetProtocol.headerSize)..<(start + length)
        )
    }

    /// Reads the fixed header of the frame at `buffer[offset...]` once its length prefix and header have
    /// arrived, whether or not the rest of the frame has: for a receiver that acts on a frame's head while
    /// its body is still arriving (a large PUT read straight into its entry). Checks nothing; the length
    /// prefix is left to ``decodeFrame(in:at:maximumPayloadLength:)``.
    ///
    /// - Parameters:
    ///   - buffer: bytes received so far.
    ///   - offset: where the frame starts (its length prefix).
    /// - Returns: the header, or `nil` when its 12 bytes (prefix and header) have not all arrived.
    @inlinable
    public static func decodeHeader(in buffer: UnsafeRawBufferPointer, at offset: Int = 0) -> CachetFrameHeader? {
        guard buffer.count - offset >= CachetProtocol.frameOverhead else { return nil }
        return readHeader(in: buffer, at: offset + CachetProtocol.lengthPrefixSize)
    }

    @inlinable
    static func readHeader(in buffer: UnsafeRawBufferPointer, at start: Int) -> CachetFrameHeader {
        CachetFrameHeader(
            version: buffer[start],
            opcode: CachetOpcode(rawValue: buffer[start + 1]),
            word: buffer.loadUnaligned(fromByteOffset: start + 2, as: UInt16.self).bigEndian,
            id: buffer.loadUnaligned(fromByteOffset: start + 4, as: UInt32.self).bigEndian
        )
    }

    /// Checks a request header: version 1 and a defined opcode.
    ///
    /// - Parameter header: the header of a request frame.
    /// - Throws: ``CachetWireError`` with code `unsupportedVersion` or `unknownOpcode`; neither closes
    ///   the connection.
    @inlinable
    public static func validateRequestHeader(_ header: CachetFrameHeader) throws(CachetWireError) {
        guard header.version == CachetProtocol.version else {
            throw unsupportedVersion(header.version)
        }
        guard header.opcode.isKnown else {
            throw unknownOpcode(header.opcode)
        }
    }

    // Error construction is kept out of line so the inlined fast path stays small.

    @usableFromInline
    static func payloadTooShort(_ length: Int) -> CachetWireError {
        CachetWireError(
            code: .payloadTooShort,
            message: "payload of \(length) bytes is shorter than the \(CachetProtocol.headerSize)-byte header"
        )
    }

    @usableFromInline
    static func payloadTooLarge(_ length: Int, limit: Int) -> CachetWireError {
        CachetWireError(
            code: .payloadTooLarge,
            message: "frame of \(length) bytes exceeds --max-frame \(limit)"
        )
    }

    @usableFromInline
    static func unsupportedVersion(_ version: UInt8) -> CachetWireError {
        CachetWireError(
            code: .unsupportedVersion,
            message: "protocol version \(version) is not supported; this node speaks version \(CachetProtocol.version)"
        )
    }

    @usableFromInline
    static func unknownOpcode(_ opcode: CachetOpcode) -> CachetWireError {
        CachetWireError(code: .unknownOpcode, message: "unknown opcode 0x\(hex2(opcode.rawValue))")
    }
}
