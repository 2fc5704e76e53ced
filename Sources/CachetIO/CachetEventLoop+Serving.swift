import CEpoll

#if canImport(Glibc)
import Glibc
#endif

/// The standard serving of a channel's I/O (``CachetChannel/handleEvents(_:)``'s default): sending, reading
/// into the input, closing on an error or the end of the stream.
extension CachetEventLoop {
    /// Reads of one channel per event before the loop moves on to the others.
    private static let readsPerEvent = 8
    private static let minimumReadRoom = 4096

    /// The standard handling of an active channel's events (``CachetChannel/handleEvents(_:)``'s default):
    /// send pending output on `EPOLLOUT`, read into the input on `EPOLLIN` and hand each read to
    /// ``CachetChannel/channelRead()``, close on an error or the end of the stream, then bring the
    /// registration up to date.
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
        let rearm: Bool
        if mask & (cachet_EPOLLIN | cachet_EPOLLRDHUP | cachet_EPOLLHUP) != 0 && channel.wantsToRead {
            guard let capped = receive(channel, peerClosed: mask & (cachet_EPOLLRDHUP | cachet_EPOLLHUP) != 0)
            else { return }
            rearm = capped
        } else {
            rearm = false
        }
        settle(channel, rearm: rearm)
    }

    /// Reads until drained (or the per-event cap) and hands each read to the channel. Returns nil when the
    /// channel was closed, true when the cap stopped it (the registration must be renewed), false otherwise.
    private func receive(_ channel: CachetChannel, peerClosed: Bool) -> Bool? {
        var reads = 0
        while reads < Self.readsPerEvent {
            reads += 1
            channel.input.reserveWritable(Self.minimumReadRoom)
            let room = channel.input.writableBytes
            switch channel.receive(into: channel.input.writePointer, count: room) {
            case .bytes(let count):
                channel.input.moveWriteIndex(forwardBy: count)
                channel.channelRead()
                guard channel.state == .active else { return nil }
                if !channel.wantsToRead { return false }
                if count < room && !peerClosed { return false }
            case .wouldBlock:
                return false
            case .endOfStream:
                let name = channel.remoteAddress ?? "the peer"
                close(channel, error: CachetIOError(code: .connectionClosed, message: "\(name) closed the connection"))
                return nil
            case .failed(let code):
                close(channel, error: closedError(channel, code: code))
                return nil
            }
        }
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
