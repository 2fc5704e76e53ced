import CachetIO
import CachetWire

/// One connection of a ``NodeWatch``, hosted by the client's `CachetEventLoop`: its output holds the
/// AUTH (if configured) and the WATCH before it connects; its input is decoded in place on the loop's
/// queue, with `CachetReplyDecoder` as ``ClientChannel`` does, and each reply handed to the watch: the
/// AUTH's (a refusal ends the connection), the WATCH's, then every EVENT. A watch opens a new channel each
/// time it connects; a channel that is no longer its watch's current one is ignored by it.
///
/// `@unchecked Sendable`: `failure` is touched on the loop's queue only; `watch` and `maximumFrameLength`
/// are immutable. The rest is `CachetChannel`'s.
final class WatchChannel: CachetChannel, @unchecked Sendable {
    /// The WATCH's request id (the AUTH's is 0, as on the client's other connections).
    static let watchID: UInt32 = 1

    let watch: NodeWatch
    let maximumFrameLength: Int
    /// Why the watch closed the channel, for its log; nil when the socket or the node ended it.
    private(set) var failure: String?

    /// - Parameters:
    ///   - watch: the node's watch, told of every reply.
    ///   - maximumFrameLength: the longest reply accepted (the client's configuration).
    init(watch: NodeWatch, maximumFrameLength: Int) {
        self.watch = watch
        self.maximumFrameLength = maximumFrameLength
        super.init(inputCapacity: 64 << 10, outputCapacity: 1 << 10)
    }

    /// Closes the channel, telling the watch why (on the loop).
    /// - Parameter reason: what went wrong.
    func fail(_ reason: String) {
        guard failure == nil, !isClosed else { return }
        failure = reason
        close()
    }

    override func channelActive() {
        watch.channelActive(self)
    }

    override func channelRead() {
        let region = input.readableRegion
        var offset = 0
        while isActive {
            let frame: CachetFrame
            do {
                guard
                    let found = try CachetReplyDecoder.decodeValidReply(
                        in: region,
                        at: offset,
                        maximumPayloadLength: maximumFrameLength
                    )
                else { break }
                frame = found
            } catch {
                fail("the node sent bytes that are not a Cachet reply (\(error.message))")
                return
            }
            offset = frame.end
            let body = UnsafeRawBufferPointer(rebasing: region[frame.body])
            switch frame.header.opcode {
            case .event:
                // An EVENT that does not decode is skipped: the next ones still say where the stream is.
                guard let event = try? CachetEvent(decoding: body) else { continue }
                watch.eventReceived(self, event)
            case .watch where frame.header.id == Self.watchID:
                watch.watchReplied(self, status: frame.header.status, body: body)
            case .auth where frame.header.status != .ok:
                fail("the node refused the configured credentials (\(frame.header.status))")
            case .none where frame.header.status != .ok:
                // A fatal reply (UNAVAILABLE over the connection limit, or a framing error): the node closes
                // the connection after it.
                fail("the node answered \(frame.header.status): \(String(decoding: body, as: UTF8.self))")
            default:
                continue
            }
        }
        guard isActive else { return }
        input.moveReadIndex(forwardBy: offset)
        // After a very large value, give the memory back.
        input.shrinkIfEmpty(above: 1 << 20, to: 64 << 10)
    }

    override func channelInactive(error: CachetIOError?) {
        watch.channelClosed(self, error: error, reason: failure)
    }
}
