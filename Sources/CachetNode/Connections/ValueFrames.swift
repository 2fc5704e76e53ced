import CachetStore

/// A GET answered in several frames (`Protocol/PROTOCOL.md`, "GET of a value longer than a frame"): a
/// value longer than one reply frame holds, sent a piece at a time to a client that asked for it with the
/// `frames` flag. Every piece is read from one opened version of the value, so a write of the key meanwhile
/// never mixes two values in one reply.
///
/// Held by its connection (``Connection/valueFrames``) while the reply is under way; the connection waits
/// for it as for any disk operation (``Connection/Phase/waitingForCompletion``), so no reply of a later
/// request comes between its frames. One piece is read at a time, charged to the connections' budget
/// while it is read; the next is read once the connection's output has drained to one piece, so a reply
/// holds at most two pieces of memory however long the value and however slowly the client reads.
/// `@unchecked Sendable`: a piece's read carries the reference through the disk tier's readers, but every
/// property is read and written only on the loop's queue (the completion hops back before touching it).
final class ValueFrames: @unchecked Sendable {
    /// Where the pieces come from.
    enum Source {
        /// A value kept in blocks, opened on the disk queue: read a piece at a time.
        case pieces(CachetDiskValuePieces)
        /// A value read whole (kept in a file of the first layout): cut into pieces.
        case bytes([UInt8])
    }

    /// The most bytes of value in one frame: a few blocks of the disk layout, small beside the budget.
    static let pieceLength = 1 << 20

    let source: Source
    /// The request's id, echoed in every frame.
    let id: UInt32
    /// The TTL left for a GET with the `ttl` flag, sent before the first piece; nil without the flag.
    let ttl: UInt32?
    /// The value's length.
    let total: Int
    /// The offset of the next piece to send.
    var next = 0
    /// Whether the next piece waits for the connection's output to drain (see ``NodeIOQueue/settle(_:now:)``).
    var awaitingDrain = false

    init(source: Source, id: UInt32, ttl: UInt32?) {
        self.source = source
        self.id = id
        self.ttl = ttl
        switch source {
        case .pieces(let pieces): total = pieces.total
        case .bytes(let bytes): total = bytes.count
        }
    }

    /// Whether the output has drained enough for the next piece to be read: to one piece, with no reply
    /// held behind forwards in flight.
    func mayContinue(on connection: Connection) -> Bool {
        awaitingDrain && connection.forwards == nil && connection.output.readableBytes <= Self.pieceLength
    }
}
