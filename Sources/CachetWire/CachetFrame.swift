/// The fixed 8-byte header at the start of every payload.
///
/// Requests carry flags in the 16-bit word, responses carry a status; ``flags`` and ``status`` read the
/// same field. See `Protocol/PROTOCOL.md`, "Frames".
public struct CachetFrameHeader: Hashable, Sendable {
    /// The protocol version byte.
    public var version: UInt8
    /// The opcode (echoed in a response).
    public var opcode: CachetOpcode
    /// The 16-bit word after the opcode: flags in a request, status in a response.
    public var word: UInt16
    /// The request id, echoed in the response.
    public var id: UInt32

    /// Creates a header.
    /// - Parameters:
    ///   - version: the version byte; ``CachetProtocol/version`` by default.
    ///   - opcode: the opcode.
    ///   - word: flags for a request, a status for a response.
    ///   - id: the request id.
    @inlinable
    public init(version: UInt8 = CachetProtocol.version, opcode: CachetOpcode, word: UInt16, id: UInt32) {
        self.version = version
        self.opcode = opcode
        self.word = word
        self.id = id
    }

    /// The request flags (the word of a request header).
    @inlinable
    public var flags: UInt16 { word }

    /// The response status (the word of a response header).
    @inlinable
    public var status: CachetStatus { CachetStatus(rawValue: word) }
}

/// A whole frame found in a buffer: its header and where its body lies.
///
/// A frame does not own bytes; ``body`` is a range of offsets into the buffer it was decoded from.
public struct CachetFrame: Hashable, Sendable {
    /// The payload's fixed header.
    public var header: CachetFrameHeader
    /// The offsets of the body within the decoded buffer.
    public var body: Range<Int>

    /// Creates a frame description.
    /// - Parameters:
    ///   - header: the fixed header.
    ///   - body: the body's offsets in the buffer.
    @inlinable
    public init(header: CachetFrameHeader, body: Range<Int>) {
        self.header = header
        self.body = body
    }

    /// The offset just past the frame: where the next frame starts.
    @inlinable
    public var end: Int { body.upperBound }
}
