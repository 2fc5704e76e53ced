import CEpoll

#if canImport(Glibc)
import Glibc
#endif

/// The standard serving of a channel's I/O (``CachetChannel/handleEvents(_:)``'s default): sending, reading
/// into the input, closing on an error or the end of the stream.
extension CachetEventLoop {
    /// Reads of one channel per event before the loop moves on to the others.
    static let readsPerEvent = 8

    /// The handling of an active channel's events (``CachetChannel/handleEvents(_:)``'s default), the one
    /// serving loop every channel goes through: close on an error; send pending output on `EPOLLOUT` (and
    /// tell the channel once it has all gone); on `EPOLLIN` or a hang-up, read while the channel wants to
    /// (into the room ``CachetChannel/readRoom()`` gives, none when it does not read now, handing each read to
    /// ``CachetChannel/channelReceived(_:)``; the end of the stream to ``CachetChannel/channelInputEnded()``);
    /// tell the channel the peer has closed (``CachetChannel/channelPeerClosed(hangup:)``); then let it bring
    /// its registration up to date (``CachetChannel/channelEventsHandled(rearm:)``).
    @inline(__always)
    func serve(_ channel: CachetChannel, mask: UInt32) {
        if mask & cachet_EPOLLERR != 0 {
            let code = CachetSocket.pendingError(channel.fd)
            close(channel, error: closedError(channel, code: code))
            return
        }
        if mask & cachet_EPOLLOUT != 0 && channel.output.readableBytes > 0 {
            guard send(channel) else { return }
            if channel.output.readableBytes == 0 { channel.channelWritable() }
            guard channel.state == .active else { return }
        }
        let peerClosed = mask & (cachet_EPOLLRDHUP | cachet_EPOLLHUP) != 0
        var capped = false
        if mask & cachet_EPOLLIN != 0 || peerClosed {
            guard let stopped = receive(channel, peerClosed: peerClosed) else { return }
            capped = stopped
        }
        if peerClosed {
            channel.channelPeerClosed(hangup: mask & cachet_EPOLLHUP != 0)
            guard channel.state == .active else { return }
        }
        channel.channelEventsHandled(rearm: capped)
    }

    /// Reads until drained (or the per-event cap), handing each read to the channel, and notes whether the
    /// socket may hold more (``CachetChannel/unreadBytesPossible``). Returns nil when the channel was closed,
    /// true when the cap stopped it (the registration must be renewed), false otherwise.
    @inline(__always)
    private func receive(_ channel: CachetChannel, peerClosed: Bool) -> Bool? {
        var reads = 0
        while reads < Self.readsPerEvent {
            reads += 1
            guard let room = channel.readRoom() else { return false }
            switch channel.receive(into: room.baseAddress.unsafelyUnwrapped, count: room.count) {
            case .bytes(let count):
                channel.unreadBytesPossible = count == room.count
                channel.channelReceived(count)
                guard channel.state == .active else { return nil }
                if count < room.count && !peerClosed { return false }
            case .wouldBlock:
                channel.unreadBytesPossible = false
                return false
            case .endOfStream:
                channel.unreadBytesPossible = false
                guard channel.channelInputEnded() else { return false }
                let name = channel.remoteAddress ?? "the peer"
                close(channel, error: CachetIOError(code: .connectionClosed, message: "\(name) closed the connection"))
                return nil
            case .failed(let code):
                channel.unreadBytesPossible = false
                close(channel, error: closedError(channel, code: code))
                return nil
            }
        }
        // The cap ended the loop: there may be more (after a short read too, when the peer has closed: the
        // end of its stream is still to be read, and would not be reported again).
        channel.unreadBytesPossible = true
        return true
    }

    private func closedError(_ channel: CachetChannel, code: Int32) -> CachetIOError {
        let name = channel.remoteAddress ?? "the peer"
        return CachetIOError(
            code: .connectionClosed,
            message: "the connection to \(name) broke: \(CachetIOError.describe(code == 0 ? ECONNRESET : code))",
            systemError: code
        )
    }

    /// Sends pending output; returns false if the channel was closed.
    private func send(_ channel: CachetChannel) -> Bool {
        guard case .failed(let code) = channel.sendOutput() else { return true }
        close(channel, error: closedError(channel, code: code))
        return false
    }

    /// Sends what the socket takes and updates the registration. Called by ``CachetChannel/flush()``.
    func flush(_ channel: CachetChannel) {
        guard send(channel) else { return }
        settle(channel)
    }
}
