/// Finds whole reply frames in a byte buffer, in place: the one decoder of replies that every reader
/// uses (the client, cachet-cli, cachet-bench, the test support). Pure: no I/O, no allocation on success.
///
/// The contract is the single-step decoder's: `nil` means the buffer does not yet hold a whole reply
/// (nothing is consumed), a thrown error means the stream is not Cachet replies and cannot be trusted
/// (close the connection), and a frame says where its body lies and where the next reply starts. The
/// length prefix is checked as soon as its 4 bytes have arrived, so a peer announcing an impossible
/// length is caught at once rather than after waiting for bytes that will never come. See
/// `Protocol/PROTOCOL.md`, "Frames".
public enum CachetReplyDecoder {
    /// Decodes the reply frame at the start of `buffer[offset...]`.
    ///
    /// - Parameters:
    ///   - buffer: bytes received so far.
    ///   - offset: where the next reply starts.
    ///   - maximumPayloadLength: the largest payload accepted; the node's default frame limit unless the
    ///     reader expects larger values.
    /// - Returns: the reply's header and body range, or `nil` when more bytes are needed.
    /// - Throws: ``CachetWireError`` `payloadTooShort` (a length below the 8-byte header) or
    ///   `payloadTooLarge` (a length above `maximumPayloadLength`). The header is not judged here: a reader
    ///   that needs version 1 calls ``validateReplyHeader(_:)``.
    @inlinable
    public static func decodeReply(
        in buffer: UnsafeRawBufferPointer,
        at offset: Int = 0,
        maximumPayloadLength: Int = CachetProtocol.defaultMaximumPayloadLength
    ) throws(CachetWireError) -> CachetFrame? {
        try CachetFrameDecoder.decodeFraming(
            in: buffer,
            at: offset,
            maximumPayloadLength: maximumPayloadLength,
            of: .reply
        )
    }

    /// ``decodeReply(in:at:maximumPayloadLength:)`` and ``validateReplyHeader(_:)`` together: the reply frame
    /// at `buffer[offset...]`, checked to be version 1's, or `nil` when more bytes are needed. What every
    /// reader of a node's replies calls.
    /// - Throws: ``CachetWireError`` as the two do.
    @inlinable
    public static func decodeValidReply(
        in buffer: UnsafeRawBufferPointer,
        at offset: Int = 0,
        maximumPayloadLength: Int = CachetProtocol.defaultMaximumPayloadLength
    ) throws(CachetWireError) -> CachetFrame? {
        guard let frame = try decodeReply(in: buffer, at: offset, maximumPayloadLength: maximumPayloadLength) else {
            return nil
        }
        try validateReplyHeader(frame.header)
        return frame
    }

    /// Checks a reply header: version 1 (every version 1 node answers in version 1's layout, whatever the
    /// request's version).
    /// - Parameter header: the header of a reply frame.
    /// - Throws: ``CachetWireError`` `malformedReply` for another version.
    @inlinable
    public static func validateReplyHeader(_ header: CachetFrameHeader) throws(CachetWireError) {
        guard header.version == CachetProtocol.version else { throw replyVersion(header.version) }
    }

    // Error construction is kept out of line so the inlined fast path stays small.

    @usableFromInline
    static func replyTooShort(_ length: Int) -> CachetWireError {
        CachetWireError(
            code: .payloadTooShort,
            message: "the peer announced a reply of \(length) bytes, shorter than the "
                + "\(CachetProtocol.headerSize)-byte header: it is not a Cachet node, or the stream is corrupt"
        )
    }

    @usableFromInline
    static func replyTooLarge(_ length: Int, limit: Int) -> CachetWireError {
        CachetWireError(
            code: .payloadTooLarge,
            message: "the peer announced a reply of \(length) bytes, more than the limit of \(limit): "
                + "it is not a Cachet node, or the stream is corrupt"
        )
    }

    @usableFromInline
    static func replyVersion(_ version: UInt8) -> CachetWireError {
        CachetWireError(
            code: .malformedReply,
            message: "reply of protocol version \(version); this reader speaks version \(CachetProtocol.version)"
        )
    }
}

extension CachetResponse {
    /// Copies a reply found by ``CachetReplyDecoder`` into an owned response.
    /// - Parameters:
    ///   - frame: the reply's frame.
    ///   - buffer: the buffer it was found in.
    public init(frame: CachetFrame, in buffer: UnsafeRawBufferPointer) {
        self.init(
            opcode: frame.header.opcode,
            status: frame.header.status,
            id: frame.header.id,
            body: Array(buffer[frame.body]),
            version: frame.header.version
        )
    }
}
