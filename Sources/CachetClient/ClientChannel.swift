import CachetIO
import CachetWire

/// One socket of a ``ConnectionSlot``, hosted by the client's `CachetEventLoop`: requests are written into
/// it from the calling threads (`CachetSharedChannel`), replies are decoded in place from its input on the
/// loop's queue and handed to the slot, which resumes their callers. A slot opens a new channel each time
/// it reconnects; a channel that is no longer its slot's current one reports nothing.
///
/// `@unchecked Sendable`: `failure` and `connected` are touched on the loop's queue only; `slot` is
/// immutable. The rest is `CachetSharedChannel`'s.
final class ClientChannel: CachetSharedChannel, @unchecked Sendable {
    let slot: ConnectionSlot
    /// Why the client closes the channel, handed to the callers; nil when the socket or the peer ended it.
    private(set) var failure: CachetClientError?
    /// Whether the connection was established (a failure before is a connect failure).
    private(set) var connected = false
    /// The pieces of a reply sent in several frames (a GET with the `frames` flag of a long value) received
    /// so far, and its id; handed to the caller joined once its last frame arrives.
    private var heldPieces: [UInt8] = []
    private var heldPiecesID: UInt32?

    init(slot: ConnectionSlot) {
        self.slot = slot
        super.init(inputCapacity: 64 << 10, outputCapacity: 16 << 10, sendsOnLoop: slot.transport.tls != nil)
        // The first bytes the connection carries: the requests written later go out after it.
        if let auth = slot.transport.authRequest { appendShared { $0.append(auth) } }
    }

    /// Closes the channel with `failure` for its callers (on the loop). A channel whose connect is still
    /// queued keeps the failure, and the queued connect reports it instead of connecting.
    func fail(_ failure: CachetClientError) {
        guard self.failure == nil, !isClosed else { return }
        self.failure = failure
        if state != .idle { close() }
    }

    override func channelActive() {
        connected = true
        slot.channelActive(self)
    }

    override func channelRead() {
        let region = input.readableRegion
        let maximum = slot.node.maximumFrameLength
        var offset = 0
        while true {
            let frame: CachetFrame
            do {
                guard
                    let found = try CachetReplyDecoder.decodeValidReply(
                        in: region,
                        at: offset,
                        maximumPayloadLength: maximum
                    )
                else { break }
                frame = found
            } catch {
                fail(
                    CachetClientError(
                        code: .protocolViolation,
                        message: "the node sent bytes that are not a Cachet reply (\(error.message)): is this port a "
                            + "Cachet node?",
                        node: slot.node.id,
                        underlying: error
                    )
                )
                return
            }
            offset = frame.end
            if frame.header.opcode == .none && frame.header.id == 0 && frame.header.status != .ok {
                // A fatal reply (UNAVAILABLE over the connection limit, or a framing error): the node closes
                // the connection after it.
                let text = String(decoding: UnsafeRawBufferPointer(rebasing: region[frame.body]), as: UTF8.self)
                fail(
                    CachetClientError(
                        code: frame.header.status == .unavailable ? .unavailable : .protocolViolation,
                        message: "the node answered \(frame.header.status) and closed the connection: \(text)",
                        node: slot.node.id
                    )
                )
                return
            }
            if frame.header.opcode == .auth && frame.header.id == 0 {
                // The reply to the AUTH this channel opened with: a refusal fails every request on it.
                guard frame.header.status == .ok else {
                    let text = String(decoding: UnsafeRawBufferPointer(rebasing: region[frame.body]), as: UTF8.self)
                    fail(
                        CachetClientError(
                            code: frame.header.status == .notAuthenticated ? .notAuthenticated : .badRequest,
                            message: "the node refused the configured credentials (\(frame.header.status)): \(text)",
                            node: slot.node.id
                        )
                    )
                    return
                }
                continue
            }
            if frame.header.status == .continues || heldPiecesID != nil {
                guard takePiece(frame, in: region) else { return }
                continue
            }
            guard slot.replyReceived(frame, in: region, on: self) else { return }
        }
        input.moveReadIndex(forwardBy: offset)
        // After a very large reply, give the memory back.
        input.shrinkIfEmpty(above: 1 << 20, to: 64 << 10)
    }

    /// Takes a frame of a reply sent in several (`Protocol/PROTOCOL.md`, "GET of a value longer than a
    /// frame"): a CONTINUES frame's bytes are held; the last frame (OK) hands the caller every piece joined,
    /// and one of another status (an error) replaces them. Returns false when the channel is no longer usable.
    private func takePiece(_ frame: CachetFrame, in region: UnsafeRawBufferPointer) -> Bool {
        let body = UnsafeRawBufferPointer(rebasing: region[frame.body])
        if let held = heldPiecesID, held != frame.header.id {
            fail(
                CachetClientError(
                    code: .protocolViolation,
                    message: "the node interleaved the frames of reply \(held) with reply \(frame.header.id)",
                    node: slot.node.id
                )
            )
            return false
        }
        if frame.header.status == .continues {
            heldPiecesID = frame.header.id
            heldPieces.append(contentsOf: body)
            return true
        }
        var pieces = heldPieces
        heldPieces = []
        heldPiecesID = nil
        if frame.header.status == .ok {
            pieces.append(contentsOf: body)
        } else {
            pieces = Array(body)
        }
        return slot.replyReceived(id: frame.header.id, status: frame.header.status, on: self) { pieces }
    }

    override func channelInactive(error: CachetIOError?) {
        slot.channelClosed(self, error: error)
    }
}
