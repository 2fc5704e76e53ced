import CachetIO
import CachetLocking
import CachetWire
import Synchronization

/// Who waits for a request: a caller's continuation, or the node's own health probe.
enum ClientWaiter: Sendable {
    case caller(UnsafeContinuation<ClientOutcome, Never>)
    case batch(BatchCollector, Int)
    case probe

    /// Hands the outcome over.
    func resume(_ outcome: ClientOutcome, node: NodeClient) {
        switch self {
        case .caller(let continuation): continuation.resume(returning: outcome)
        case .batch(let collector, let index): collector.complete(index, outcome)
        case .probe:
            if case .reply(let status, _) = outcome {
                node.probeAnswered(status: status)
            } else {
                node.probeFailed()
            }
        }
    }
}

/// How a request ended, as handed to its caller.
enum ClientOutcome: Sendable {
    case reply(CachetStatus, [UInt8])
    case failure(CachetClientError)
}

/// One pooled connection to a node, reopened when it closes: many requests in flight on one socket,
/// matched by id (``ConnectionStateMachine``). Each socket is a ``ClientChannel`` on the client's
/// `CachetEventLoop`; the slot outlives them and opens the next when a request needs it.
///
/// Requests are written by the calling thread straight away when no other write is under way
/// (`CachetSharedChannel`): the request is queued in the state machine and encoded into the channel's
/// shared output under the slot's lock, so that the bytes on the socket follow the machine's order, and
/// sent after the lock is released. Requests issued while a send is under way (by other tasks, or a batch)
/// go out with that sender's next `send`, so requests of the same turn share one system call. Only when
/// the socket's buffer is full does the event loop take over the writing. Replies are read and callers
/// resumed on the event loop's queue.
///
/// Locks: the slot's first, then the channel's (inside ``ClientChannel/writeShared(_:)``); the loop never
/// holds the channel's lock while it calls the slot.
final class ConnectionSlot: @unchecked Sendable {
    // `state` is guarded by its lock; the references and `index` are immutable.
    private struct State {
        var machine = ConnectionStateMachine<ClientWaiter>()
        /// The socket: connecting or connected; nil while the machine is idle (or shut down and closed).
        var channel: ClientChannel?
    }

    unowned let node: NodeClient
    unowned let transport: ClientTransport
    let index: Int
    private let state = CachetLock(State())
    private let nextID = Atomic<UInt32>(1)
    /// The id of the request whose waiter was resumed last with its reply, its cancellation or its refusal:
    /// what a spinning lone caller watches (``LoneCallerSpin``). Stored after the resume, so a caller that
    /// sees its id sees its continuation resumed; ids are unique per slot, so a late store for an earlier
    /// call cannot be taken for a later one's.
    private let resumedID = Atomic<UInt32>(0)
    /// Bumped after failing waiters whose ids the state machine does not hand back (timeouts, a lost or
    /// refused connection): a spinning caller compares it with a mark taken before issuing. A bump for
    /// an earlier call that lands after a later call's mark ends that spin early, which costs only the spin.
    private let failures = Atomic<UInt32>(0)

    init(node: NodeClient, transport: ClientTransport, index: Int) {
        self.node = node
        self.transport = transport
        self.index = index
    }

    /// A fresh request id.
    @inline(__always)
    func reserveID() -> UInt32 { nextID.wrappingAdd(1, ordering: .relaxed).oldValue }

    /// A mark to pass to ``isAnswered(id:failuresMark:)``: take it before issuing the request.
    @inline(__always)
    func failuresMark() -> UInt32 { failures.load(ordering: .acquiring) }

    /// Whether the waiter of request `id` has been resumed: with its reply, cancellation or refusal, or by
    /// a failure of waiters since `failuresMark` was taken.
    @inline(__always)
    func isAnswered(id: UInt32, failuresMark: UInt32) -> Bool {
        resumedID.load(ordering: .acquiring) == id || failures.load(ordering: .acquiring) != failuresMark
    }

    /// Requests waited for on this slot.
    var waiting: Int { state.withLock { $0.machine.waiting } }

    /// Whether the tick must run for this slot: requests waited for, a connect in progress, or a drain.
    var needsTimer: Bool {
        state.withLock { $0.machine.waiting > 0 || $0.machine.state == .connecting || $0.machine.state == .draining }
    }

    private enum Next {
        case none
        case send(ClientChannel)
        case connect(ClientChannel)
        case reject(CachetClientError)
    }

    /// Issues request `id`: queues its waiter, encodes it, and sends it (or starts connecting).
    /// Called on the caller's thread, inside `withUnsafeContinuation`.
    func issue(_ request: ClientRequest, id: UInt32, waiter: ClientWaiter, deadline: UInt64) {
        let cancelled: Bool
        if case .caller = waiter { cancelled = Task.isCancelled } else { cancelled = false }
        let next = state.withLock { state -> Next in
            if cancelled {
                return .reject(CachetClientError(code: .cancelled, message: "the calling task was cancelled"))
            }
            switch state.machine.issue(id: id, waiter: waiter, deadline: deadline) {
            case .rejectShutdown:
                return .reject(node.shutdownError())
            case .connect:
                let channel = ClientChannel(slot: self)
                state.channel = channel
                // Sent by the loop once connected.
                _ = channel.writeShared { request.encode(id: id, to: &$0) }
                return .connect(channel)
            case .wait, .write:
                guard let channel = state.channel else {
                    assertionFailure("a connecting or ready slot without a channel")
                    return .none
                }
                return channel.writeShared { request.encode(id: id, to: &$0) } ? .send(channel) : .none
            }
        }
        switch next {
        case .none:
            transport.armTick()
        case .send(let channel):
            transport.armTick()
            channel.sendShared()
        case .connect(let channel):
            transport.armTick()
            connect(channel)
        case .reject(let error):
            waiter.resume(.failure(error), node: node)
            resumedID.store(id, ordering: .releasing)
        }
    }

    /// Issues `count` requests in one turn: `produce(i, encode)` calls `encode(request, id, waiter)` for
    /// request `i`. They go out in one write (or with the connect).
    func issueBatch(
        count: Int,
        deadline: UInt64,
        _ produce: (Int, (ClientRequest, UInt32, ClientWaiter) -> Void) -> Void
    ) {
        var rejected: [(ClientWaiter, CachetClientError)] = []
        let next = state.withLock { state -> Next in
            var connecting: ClientChannel?
            for position in 0..<count {
                produce(position) { request, id, waiter in
                    switch state.machine.issue(id: id, waiter: waiter, deadline: deadline) {
                    case .rejectShutdown:
                        rejected.append((waiter, node.shutdownError()))
                        return
                    case .connect:
                        let channel = ClientChannel(slot: self)
                        state.channel = channel
                        connecting = channel
                    case .wait, .write:
                        break
                    }
                    // Appended only: the whole batch is sent at once below.
                    state.channel?.appendShared { request.encode(id: id, to: &$0) }
                }
            }
            if let connecting { return .connect(connecting) }
            if let channel = state.channel, channel.writeShared({ _ in }) { return .send(channel) }
            return .none
        }
        transport.armTick()
        switch next {
        case .none, .reject: break
        case .send(let channel): channel.sendShared()
        case .connect(let channel): connect(channel)
        }
        for (waiter, error) in rejected { waiter.resume(.failure(error), node: node) }
    }

    /// The caller of request `id` gave up: fail it now; its reply is dropped when it comes.
    func abandon(id: UInt32) {
        let waiter = state.withLock { $0.machine.abandon(id: id) }
        guard let waiter else { return }
        waiter.resume(
            .failure(CachetClientError(code: .cancelled, message: "the calling task was cancelled")),
            node: node
        )
        resumedID.store(id, ordering: .releasing)
    }

    // MARK: Connecting

    /// Hands a new channel to the loop to connect (its connect timeout is the loop's timer). The address
    /// is resolved on the caller's thread, once per node.
    private func connect(_ channel: ClientChannel) {
        let address: CachetSocketAddress
        do {
            address = try node.address()
        } catch {
            connectFailed(channel, error: error)
            return
        }
        transport.startIfNeeded()
        let loop = transport.loop
        let timeout = node.connectTimeout
        let tls = transport.tls
        loop.execute {
            // Closed before the loop got to it (the node went down, the client shut down): report that.
            if channel.failure != nil {
                channel.slot.channelClosed(channel, error: nil)
                return
            }
            if let tls { channel.useTLS(tls) }
            loop.connect(channel, to: [address], timeout: timeout)
        }
    }

    /// The connect could not even start (no such host): every queued request fails, and the node goes
    /// down.
    private func connectFailed(_ channel: ClientChannel, error: CachetIOError) {
        let waiters = state.withLock { state -> [ClientWaiter] in
            guard state.channel === channel else { return [] }
            state.channel = nil
            return state.machine.closed()
        }
        let failure = CachetClientError(
            code: .connectionFailed,
            message: "could not connect to \(node.node.host) port \(node.node.port): is the node running?",
            node: node.id,
            underlying: error
        )
        node.connectFailed()
        fail(waiters, with: failure)
    }

    // MARK: Events of the channel (on the loop)

    /// The channel connected: requests queued meanwhile are being sent by the channel already.
    func channelActive(_ channel: ClientChannel) {
        state.withLock { state in
            guard state.channel === channel else { return }
            _ = state.machine.connected()
        }
    }

    /// A reply was decoded: hands it to its caller. Returns false when the channel is no longer usable
    /// (a reply to no request in flight: the channel is closed), or no longer the slot's.
    func replyReceived(_ frame: CachetFrame, in region: UnsafeRawBufferPointer, on channel: ClientChannel) -> Bool {
        replyReceived(id: frame.header.id, status: frame.header.status, on: channel) {
            frame.body.isEmpty ? [] : Array(UnsafeRawBufferPointer(rebasing: region[frame.body]))
        }
    }

    /// A reply was decoded, its body made by `body` only when a caller takes it (a reply in several frames
    /// hands its pieces joined). Returns false as ``replyReceived(_:in:on:)`` does.
    func replyReceived(
        id: UInt32,
        status: CachetStatus,
        on channel: ClientChannel,
        body: () -> [UInt8]
    ) -> Bool {
        let action = state.withLock { state -> ConnectionStateMachine<ClientWaiter>.ReplyAction? in
            guard state.channel === channel else { return nil }
            let action = state.machine.replyReceived(id: id)
            if case .protocolViolation = action { state.channel = nil }
            return action
        }
        switch action {
        case nil:
            return false
        case .deliver(let waiter)?:
            node.replied()
            waiter.resume(.reply(status, body()), node: node)
            resumedID.store(id, ordering: .releasing)
            return true
        case .discard?:
            node.replied()
            return true
        case .protocolViolation(let waiters)?:
            let failure = CachetClientError(
                code: .protocolViolation,
                message: "the node sent a reply with id \(id) to no request in flight: "
                    + "is this port a Cachet node?",
                node: node.id
            )
            fail(waiters, with: failure)
            channel.fail(failure)
            return false
        }
    }

    /// The channel closed (its connect failed or timed out, the node closed it, the client closed it, the
    /// loop stopped): if it is the slot's current one, every request on it fails.
    func channelClosed(_ channel: ClientChannel, error: CachetIOError?) {
        let waiters = state.withLock { state -> [ClientWaiter]? in
            guard state.channel === channel else { return nil }
            state.channel = nil
            return state.machine.closed()
        }
        guard let waiters else { return }
        let failure: CachetClientError
        if let reason = channel.failure {
            failure = reason
        } else if error?.code == .loopStopped {
            failure = node.shutdownError()
        } else if !channel.connected {
            // Counted before the callers resume, so that a caller sees the node's health as it is after
            // its own failure.
            node.connectFailed()
            if error?.code == .timedOut {
                failure = CachetClientError(
                    code: .timeout,
                    message: "could not connect within the connect timeout of \(node.connectTimeout)",
                    node: node.id,
                    underlying: error
                )
            } else {
                failure = CachetClientError(
                    code: .connectionFailed,
                    message: "could not connect to \(node.node.host) port \(node.node.port): is the node running?",
                    node: node.id,
                    underlying: error
                )
            }
        } else {
            failure = CachetClientError(
                code: .connectionFailed,
                message: "the connection to the node closed with requests in flight",
                node: node.id,
                underlying: error
            )
        }
        fail(waiters, with: failure)
    }

    // MARK: Closing

    /// Closes the current channel, from any thread (the node went down, or the client shuts down): its
    /// requests fail with `failure`.
    func closeCurrent(failure: CachetClientError) {
        guard let channel = state.withLock({ $0.channel }) else { return }
        transport.loop.execute { channel.fail(failure) }
    }

    /// Shutting down: refuse new requests; returns whether nothing is in flight any more.
    func drain() -> Bool {
        state.withLock { $0.machine.drain() }
    }

    /// Whether the slot has shut down and let its channel go.
    var isShutDown: Bool { state.withLock { $0.machine.state == .shutdown && $0.channel == nil } }

    /// Times out requests past their deadlines (on the loop); returns the number of requests that timed
    /// out. A shut-down slot whose last request is answered closes its channel.
    func expire(now: UInt64) -> Int {
        let (waiters, finished) = state.withLock { state -> ([ClientWaiter], ClientChannel?) in
            let waiters = state.machine.expire(now: now)
            guard state.machine.state == .shutdown, let channel = state.channel else { return (waiters, nil) }
            state.channel = nil
            return (waiters, channel)
        }
        if !waiters.isEmpty {
            // Count the timeouts before resuming the callers, so that a caller sees the node's health
            // as it is after its own timeout.
            node.timedOut(count: waiters.count)
            fail(
                waiters,
                with: CachetClientError(
                    code: .timeout,
                    message: "no reply within the request timeout of \(node.requestTimeout): the node may be "
                        + "overloaded or stopped",
                    node: node.id
                )
            )
        }
        finished?.fail(node.shutdownError())
        return waiters.count
    }

    private func fail(_ waiters: [ClientWaiter], with failure: CachetClientError) {
        for waiter in waiters { waiter.resume(.failure(failure), node: node) }
        if !waiters.isEmpty { failures.wrappingAdd(1, ordering: .releasing) }
    }
}
