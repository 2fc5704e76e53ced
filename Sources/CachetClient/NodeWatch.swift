import CachetIO
import CachetWire

/// One node's share of a ``CachetClient/changes(prefix:values:maximumValueLength:)`` stream, on the
/// client's event loop: it opens a ``WatchChannel`` to the node (TLS and AUTH as the client is
/// configured), whose WATCH resumes after the last change delivered, yields each EVENT into the stream,
/// and after a connection ends opens the next once the backoff has passed (``WatchStateMachine`` decides;
/// this class does what it says).
///
/// Two timers of the loop, never both at once: the deadline of the WATCH's reply (the request timeout,
/// from when the connection is up; the connect has the loop's own connect timeout) and the backoff before
/// the next connection. ``stop()`` cancels the timer and closes the channel at once, so that the node
/// sees the connection go as soon as the stream ends; ``clientClosed()`` also ends the stream, with
/// `shutdown`.
///
/// `@unchecked Sendable`: made on the caller's thread and handed to the loop once; afterwards `machine`,
/// `channel` and `timer` are touched on the loop's queue only, and the other properties are immutable.
final class NodeWatch: @unchecked Sendable {
    /// The error the stream ends with when the client shuts down.
    static let shutdownError = CachetClientError(
        code: .shutdown,
        message: "the client was shut down: its streams of changes end with it"
    )

    let node: NodeClient
    let request: CachetWatchRequest
    let transport: ClientTransport
    let coder: any CachetCoder
    let continuation: AsyncThrowingStream<CachetChange, any Error>.Continuation
    private var machine = WatchStateMachine()
    /// The connection, while one is open or opening.
    private var channel: WatchChannel?
    /// The reply's deadline while connecting, the backoff while waiting; nil otherwise.
    private var timer: CachetTimerID?

    /// Creates a watch (not started).
    /// - Parameters:
    ///   - node: the node watched, for its address, timeouts and frame limit.
    ///   - request: the WATCH to send (its position is set on each connection).
    ///   - transport: the client's loop, TLS context and AUTH request.
    ///   - coder: how the changes' values decode.
    ///   - continuation: where the changes go.
    init(
        node: NodeClient,
        request: CachetWatchRequest,
        transport: ClientTransport,
        coder: any CachetCoder,
        continuation: AsyncThrowingStream<CachetChange, any Error>.Continuation
    ) {
        self.node = node
        self.request = request
        self.transport = transport
        self.coder = coder
        self.continuation = continuation
    }

    private var loop: CachetEventLoop { transport.loop }

    // MARK: Lifecycle (on the loop)

    /// Opens the first connection.
    func start() {
        loop.preconditionInEventLoop()
        let action = machine.start()
        guard action != .none else { return }
        transport.add(self)
        perform(action)
    }

    /// Ends the watch: cancels its timer and closes its connection. Calling it again does nothing.
    func stop() {
        loop.preconditionInEventLoop()
        guard machine.stop() else { return }
        transport.remove(self)
        cancelTimer()
        let closing = channel
        channel = nil
        closing?.close()
    }

    /// The client shut down (its loop stopped, which drops timers without running them): ends the watch and
    /// the stream, with `shutdown`.
    func clientClosed() {
        stop()
        continuation.finish(throwing: Self.shutdownError)
    }

    private func perform(_ action: WatchStateMachine.Action) {
        switch action {
        case .none:
            break
        case .connect(let position):
            connect(resumingAfter: position)
        case .retry(let delay):
            timer = loop.schedule(after: delay) { [self] in
                timer = nil
                perform(machine.retryDue())
            }
        }
    }

    private func cancelTimer() {
        guard let timer else { return }
        loop.cancelTimer(timer)
        self.timer = nil
    }

    /// Opens a connection whose first bytes are the AUTH (if configured) and the WATCH.
    private func connect(resumingAfter position: CachetWatchPosition?) {
        let address: CachetSocketAddress
        do {
            // Resolved by `changes` on the caller's thread and kept by the node; resolved here only when
            // that failed.
            address = try node.address()
        } catch {
            node.logger.debug("watch: the node's address does not resolve", metadata: ["cachet.reason": "\(error)"])
            perform(machine.connectionEnded())
            return
        }
        var watch = request
        watch.resumingAfter = position
        let channel = WatchChannel(watch: self, maximumFrameLength: node.maximumFrameLength)
        if let auth = transport.authRequest { channel.write(auth) }
        channel.write(CachetCommand.watch(watch).encoded(id: WatchChannel.watchID))
        if let tls = transport.tls { channel.useTLS(tls) }
        self.channel = channel
        loop.connect(channel, to: [address], timeout: node.connectTimeout)
    }

    // MARK: Events of the channel (on the loop)

    /// The connection is up (its AUTH and WATCH are being sent): the replies must come within the request
    /// timeout.
    func channelActive(_ channel: WatchChannel) {
        guard channel === self.channel else { return }
        let timeout = node.requestTimeout
        timer = loop.schedule(after: timeout) { [self] in
            timer = nil
            channel.fail("no reply to WATCH within the request timeout of \(timeout)")
        }
    }

    /// The WATCH's reply: OK with the position the stream starts after, or a refusal, which ends the
    /// connection (the next one tries again after the backoff).
    func watchReplied(_ channel: WatchChannel, status: CachetStatus, body: UnsafeRawBufferPointer) {
        guard channel === self.channel else { return }
        cancelTimer()
        guard status == .ok, body.count == 16 else {
            let text = String(decoding: body, as: UTF8.self)
            channel.fail("the node answered WATCH with \(status): \(text)")
            return
        }
        let run = body.loadUnaligned(fromByteOffset: 0, as: UInt64.self).bigEndian
        let sequence = body.loadUnaligned(fromByteOffset: 8, as: UInt64.self).bigEndian
        machine.accepted(at: CachetWatchPosition(run: run, sequence: sequence))
    }

    /// An EVENT: yielded into the stream once the WATCH is accepted.
    func eventReceived(_ channel: WatchChannel, _ event: CachetEvent) {
        guard channel === self.channel, let position = machine.received(sequence: event.sequence) else { return }
        continuation.yield(
            CachetChange(
                kind: event.kind,
                key: event.key,
                node: node.id,
                position: position,
                ttl: event.ttl,
                rawValue: event.value,
                valueOmitted: event.valueOmitted,
                coder: coder
            )
        )
    }

    /// The connection ended: it could not open, the node closed it, or this watch closed it (a refusal, a
    /// late reply, bytes that are not Cachet replies). The next opens after the backoff; when the loop
    /// stopped (the client shut down), the stream ends.
    func channelClosed(_ channel: WatchChannel, error: CachetIOError?, reason: String?) {
        guard channel === self.channel else { return }
        self.channel = nil
        cancelTimer()
        if error?.code == .loopStopped {
            clientClosed()
            return
        }
        node.logger.debug(
            "watch: the connection ended; connecting again after the backoff",
            metadata: ["cachet.reason": "\(reason ?? error?.message ?? "closed")"]
        )
        perform(machine.connectionEnded())
    }
}
