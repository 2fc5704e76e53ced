import CEpoll

#if canImport(Glibc)
import Glibc
#endif

/// Outbound channels: connecting to the first address that answers, without blocking the loop.
extension CachetEventLoop {

    /// Connects a channel to the first of `addresses` that answers within `timeout` (all together), without
    /// blocking the loop. The channel gets ``CachetChannel/channelActive()`` once connected, or
    /// ``CachetChannel/channelInactive(error:)`` with `connectionRefused`, `timedOut` or `connectionFailed`
    /// (always later, never from inside this call). Output written before is sent once connected.
    /// Called on `queue`.
    /// - Parameters:
    ///   - channel: a channel not hosted yet.
    ///   - addresses: resolved addresses, tried in order.
    ///   - timeout: the time allowed.
    public func connect(_ channel: CachetChannel, to addresses: [CachetSocketAddress], timeout: Duration) {
        preconditionInEventLoop()
        precondition(channel.state == .idle, "a channel can be connected once")
        channel.eventLoop = self
        channel._state = .connecting
        channel.pendingAddresses = addresses
        channel.remoteAddress = channel.remoteAddress ?? addresses.first?.description
        channel.connectTimer = schedule(after: timeout) { [unowned self] in
            channel.connectTimer = nil
            let name = channel.remoteAddress ?? "the server"
            close(
                channel,
                error: CachetIOError(
                    code: .timedOut,
                    message: "cannot connect to \(name): no answer within \(timeout) (is the host up?)",
                    systemError: ETIMEDOUT
                )
            )
        }
        if stopped {
            fail(channel, CachetIOError(code: .loopStopped, message: "the event loop was stopped"))
            return
        }
        attemptConnect(channel)
    }

    /// Resolves `address` on the calling thread (names through getaddrinfo, which may block: resolve
    /// beforehand with ``CachetAddress/resolve()`` where that matters), then connects as
    /// ``connect(_:to:timeout:)-(_,[CachetSocketAddress],_)``. Called on `queue`.
    /// - Parameters:
    ///   - channel: a channel not hosted yet.
    ///   - address: where to connect.
    ///   - timeout: the time allowed for connecting.
    public func connect(_ channel: CachetChannel, to address: CachetAddress, timeout: Duration) {
        preconditionInEventLoop()
        let resolved: [CachetSocketAddress]
        do {
            try address.validate()
            resolved = try address.resolve()
        } catch {
            channel.eventLoop = self
            channel._state = .connecting
            fail(channel, error)
            return
        }
        channel.remoteAddress = address.description
        connect(channel, to: resolved, timeout: timeout)
    }

    /// Tries the next address; fails the channel (later) when none is left.
    private func attemptConnect(_ channel: CachetChannel) {
        while !channel.pendingAddresses.isEmpty {
            let next = channel.pendingAddresses.removeFirst()
            do {
                let (fd, _) = try CachetSocket.startConnect(to: next)
                // Connected or not, epoll reports the outcome: a connected socket is writable at once.
                if adopt(channel, fd: fd, state: .connecting) { return }
                return
            } catch {
                channel.lastConnectError = error
            }
        }
        let name = channel.remoteAddress ?? "the server"
        fail(
            channel,
            channel.lastConnectError
                ?? CachetIOError(code: .connectionFailed, message: "cannot connect to \(name): no address to try")
        )
    }

    /// Closes `channel` with `error` on a later turn of the queue, so that the caller never sees a
    /// handler run from inside its own call.
    private func fail(_ channel: CachetChannel, _ error: CachetIOError) {
        execute { [self] in close(channel, error: error) }
    }

    func finishConnect(_ channel: CachetChannel, mask: UInt32) {
        let code = CachetSocket.pendingError(channel.fd)
        if code == 0 && mask & (cachet_EPOLLOUT) != 0 {
            if let timer = channel.connectTimer {
                cancelTimer(timer)
                channel.connectTimer = nil
            }
            channel.pendingAddresses = []
            channel.lastConnectError = nil
            channel._state = .active
            // Renewed even if unchanged: bytes the server sent at once arrived with this event's edge.
            settle(channel, rearm: true)
            channel.didBecomeActive()
            channel.channelActive()
            if channel.state == .active { flush(channel) }
            return
        }
        guard code != 0 || mask & (cachet_EPOLLERR | cachet_EPOLLHUP) != 0 else { return }
        // This address failed: drop its socket and try the next one, if any.
        let name = channel.remoteAddress ?? "the server"
        channel.lastConnectError = CachetIOError.connectFailure(code == 0 ? ECONNREFUSED : code, address: name)
        release(channel)
        channel._state = .connecting
        attemptConnect(channel)
    }
}
