import CEpoll
import CachetLocking

#if canImport(Glibc)
import Glibc
#endif

/// A ``CachetChannel`` that any thread may write to, and that sends from the writing thread when it can:
/// for a client whose callers should not pay a hop to the loop's queue per request.
///
/// Writing: ``writeShared(_:)`` appends to a pending output under the channel's lock, from any thread
/// (the loop's queue included). When the channel is active and no send is under way, the writing thread
/// becomes the sender: it calls ``sendShared()`` once it has released its own locks, and sends the pending
/// bytes itself, together with whatever other threads append meanwhile, until nothing is left. While a
/// send is under way, other threads only append; their bytes go out with the sender's next `send`, so
/// requests of one turn share one system call. Bytes written before the connection completes are sent
/// by the loop as soon as it does.
///
/// When the socket is full (`EAGAIN`), the sender hands the rest to the loop: it asks, through
/// ``CachetEventLoop/execute(_:)``, to be told when the socket is writable (`EPOLLOUT`), and the loop goes
/// on sending from there, including what was appended meanwhile. Threads keep appending without sending
/// until the loop has sent everything. Only one thread sends at a time, so the bytes of one
/// ``writeShared(_:)`` are never interleaved with another's.
///
/// Closing: the loop closes the channel as any other (an error, the peer, ``close(error:)``, the loop
/// stopping). If a calling thread is sending at that moment, the loop takes the socket out of its epoll
/// set but does not close the descriptor: the sending thread closes it when it finishes. Otherwise the
/// descriptor's number could be reused by a socket opened meanwhile (by any code of the process), and the
/// sender's next `send` would put its bytes on that stranger's connection. Bytes appended after the close
/// are dropped.
///
/// Reading is the loop's, as for every channel: ``CachetChannel/channelRead()`` on its queue. The loop-side
/// ``CachetChannel/write(_:)-(UnsafeRawBufferPointer)`` and ``CachetChannel/flush()`` must not be used on
/// a shared channel (their bytes could be interleaved with a sender's); on the loop's queue, use
/// ``writeShared(_:)`` too.
///
/// `@unchecked Sendable`: the pending output, the phase and who sends are guarded by `shared`'s lock; the
/// buffer being sent (`sending`) belongs to the one thread that holds the sender's turn, which is handed
/// over under that lock; `sharedFD` is written once, before the channel becomes active under the lock,
/// and only read afterwards; `awaitingWritable` and the rest of ``CachetChannel`` are touched on the
/// loop's queue only.
open class CachetSharedChannel: CachetChannel, @unchecked Sendable {
    private enum Phase {
        case connecting
        case active
        case closed
    }

    private enum Sender {
        /// Nobody: the next writer sends.
        case none
        /// A calling thread is in ``sendShared()``.
        case caller
        /// The loop sends (after connecting, or once the socket is writable again).
        case loop
    }

    private struct Shared: ~Copyable {
        /// Bytes appended and not yet taken by a sender.
        var pending: CachetByteBuffer
        var phase = Phase.connecting
        var sender = Sender.none
        /// The loop closed the channel while a caller was sending: that caller closes `sharedFD`.
        var retired = false
        /// The loop, while the channel is active: where a blocked sender hands over.
        var loop: CachetEventLoop?
    }

    private let shared: CachetLock<Shared>
    // Unchecked exclusivity: `sending` is used only by the holder of the sender's turn (see the type's
    // comment), `sharedFD` is fixed once active, `awaitingWritable` is read on every event of the loop.
    /// The bytes the current sender is sending.
    @exclusivity(unchecked) private final var sending: CachetByteBuffer
    /// The socket, as it was when the channel became active (kept after the close, for a retired sender).
    @exclusivity(unchecked) private final var sharedFD: Int32 = -1
    /// The loop waits for `EPOLLOUT` to go on sending.
    @exclusivity(unchecked) private final var awaitingWritable = false

    /// Whether only the loop sends (a TLS channel: its session is used on one thread): writers append and
    /// hand the send to the loop instead of sending themselves.
    public final let sendsOnLoop: Bool

    /// Creates a channel.
    /// - Parameters:
    ///   - inputCapacity: the input buffer's initial size.
    ///   - outputCapacity: the initial size of the pending output and of the buffer being sent (each).
    ///   - sendsOnLoop: whether only the loop sends (required for a channel that will use TLS).
    public init(inputCapacity: Int = 16 << 10, outputCapacity: Int = 16 << 10, sendsOnLoop: Bool = false) {
        self.sendsOnLoop = sendsOnLoop
        shared = CachetLock(Shared(pending: CachetByteBuffer(capacity: outputCapacity)))
        sending = CachetByteBuffer(capacity: outputCapacity)
        // The loop-side output is not used by a shared channel.
        super.init(inputCapacity: inputCapacity, outputCapacity: 64)
    }

    // MARK: - Writing (any thread)

    /// Appends bytes to the pending output, from any thread: `body` writes them into the buffer (under the
    /// channel's lock, so that the bytes of one call stay together and calls keep their order).
    ///
    /// Call it while holding a lock of your own when the order of the bytes must follow your own state
    /// (requests queued in send order, say); the lock order is then yours first, the channel's second, and
    /// no handler of the channel may take yours while the loop holds the channel's (none does: the channel
    /// calls no handler under its lock).
    /// - Parameter body: appends to the buffer; it must not call back into the channel.
    /// - Returns: whether the calling thread has become the sender. If so, it must call ``sendShared()``
    ///   (after releasing any lock the channel's handlers take); nothing is sent until it does. False when
    ///   the bytes wait for the connection, for a send under way, or were dropped because the channel is
    ///   closed.
    public final func writeShared(_ body: (inout CachetByteBuffer) -> Void) -> Bool {
        let handOff = shared.withLockUnchecked { state -> CachetEventLoop?? in
            guard state.phase != .closed else { return nil }
            body(&state.pending)
            guard state.phase == .active, state.sender == .none, state.pending.readableBytes > 0 else {
                return nil
            }
            guard sendsOnLoop else {
                state.sender = .caller
                swap(&state.pending, &sending)
                return .some(nil)
            }
            state.sender = .loop
            swap(&state.pending, &sending)
            return .some(state.loop)
        }
        guard case .some(let loop) = handOff else { return false }
        guard let loop else { return true }
        loop.execute { [self] in runSender(onLoop: true) }
        return false
    }

    /// Appends bytes to the pending output without becoming the sender, from any thread: they go out with
    /// the next send (a send under way, the loop's once connected, or the one a later ``writeShared(_:)``
    /// starts). For a batch: append every part, then call `writeShared { _ in }` once, so that the whole
    /// batch goes out in one `send`.
    /// - Parameter body: appends to the buffer; it must not call back into the channel.
    public final func appendShared(_ body: (inout CachetByteBuffer) -> Void) {
        shared.withLockUnchecked { state in
            guard state.phase != .closed else { return }
            body(&state.pending)
        }
    }

    /// Sends as the sender, after ``writeShared(_:)`` returned true: everything pending, including what
    /// other threads append meanwhile, until nothing is left or the socket is full (then the loop takes
    /// over). Returns without waiting for the socket.
    public final func sendShared() {
        runSender(onLoop: false)
    }

    /// Appends `bytes` and, when the calling thread becomes the sender, sends them at once.
    /// - Parameter bytes: what to send.
    public final func writeAndSendShared(_ bytes: UnsafeRawBufferPointer) {
        if writeShared({ $0.append(bytes) }) { sendShared() }
    }

    /// Bytes appended and not yet handed to a sender (for tests and diagnostics).
    public final var pendingSharedBytes: Int {
        shared.withLockUnchecked { $0.pending.readableBytes }
    }

    private enum Next {
        case done
        case more
        case closeDescriptor
        case waitForWritable(CachetEventLoop?)
    }

    /// The sender's loop: sends `sending`, then takes what was appended meanwhile, until done.
    private final func runSender(onLoop: Bool) {
        let fd = sharedFD
        while true {
            var blocked = false
            var failed = false
            // A TLS channel is sent from the loop only, through its session (its ``stream``); closed, it sends
            // nothing. A plain one is sent from the caller's thread, on a plain stream over the shared socket.
            let closedTLS = sendsOnLoop && !isActive
            while sending.readableBytes > 0 && !blocked && !failed {
                let result =
                    sendsOnLoop
                    ? (closedTLS ? .failed(EBADF) : transmit(sending.readableRegion))
                    : CachetStream(fd: fd, tls: nil).write(sending.readableRegion)
                switch result {
                case .bytes(let count): sending.moveReadIndex(forwardBy: count)
                case .wouldBlock: blocked = true
                case .endOfStream, .failed: failed = true
                }
            }
            if failed && closedTLS {
                sending.clear()
            } else if failed {
                sending.clear()
                // The loop learns of the broken connection from the socket (a shut-down socket reports a
                // hang-up) and closes the channel; the error is its to report.
                _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
            }
            // `sending` is emptied before the turn is given up: the next sender swaps it in at once.
            let next = shared.withLockUnchecked { state -> Next in
                if state.retired {
                    sending.clear()
                    state.retired = false
                    state.sender = .none
                    return .closeDescriptor
                }
                if state.phase != .active || failed {
                    sending.clear()
                    state.sender = .none
                    return .done
                }
                if blocked {
                    state.sender = .loop
                    return .waitForWritable(state.loop)
                }
                guard state.pending.readableBytes > 0 else {
                    state.sender = .none
                    return .done
                }
                swap(&state.pending, &sending)
                return .more
            }
            switch next {
            case .more:
                continue
            case .done:
                return
            case .closeDescriptor:
                _ = Glibc.close(fd)
                return
            case .waitForWritable(let loop):
                if onLoop {
                    awaitWritable()
                } else {
                    loop?.execute { [self] in awaitWritable() }
                }
                return
            }
        }
    }

    /// On the loop: watch for `EPOLLOUT` and go on sending then.
    private final func awaitWritable() {
        guard isActive else { return }
        awaitingWritable = true
        // Renewed even if unchanged: a socket that is writable by now is reported at once.
        updateInterest(rearm: true)
    }

    // MARK: - The loop's side

    /// Sends what is left once the socket is writable, then handles the events as every channel does.
    /// - Parameters:
    ///   - events: what epoll reported.
    ///   - loop: the loop calling.
    open override func handleEvents(_ events: Events, on loop: CachetEventLoop) {
        if awaitingWritable && !events.isDisjoint(with: [.writable, .error, .hangup]) {
            awaitingWritable = false
            runSender(onLoop: true)
        }
        super.handleEvents(events, on: loop)
    }

    /// The events of ``CachetChannel/activeEvents``, and ``CachetChannel/Events/writable`` while the loop
    /// waits to go on sending.
    open override var activeEvents: Events {
        awaitingWritable ? super.activeEvents.union(.writable) : super.activeEvents
    }

    override func didBecomeActive() {
        sharedFD = fd
        let send = shared.withLockUnchecked { state -> Bool in
            state.loop = eventLoop
            state.phase = .active
            guard state.sender == .none, state.pending.readableBytes > 0 else { return false }
            state.sender = .loop
            swap(&state.pending, &sending)
            return true
        }
        if send { runSender(onLoop: true) }
    }

    override func closeDescriptor(_ fd: Int32) {
        let callerSends = shared.withLockUnchecked { state -> Bool in
            // While connecting, no thread but the loop has seen the descriptor (a failed attempt's
            // socket is closed here, and the next address tried).
            guard state.phase == .active else { return false }
            state.phase = .closed
            state.loop = nil
            state.pending.clear()
            guard state.sender == .caller else { return false }
            state.retired = true
            return true
        }
        if !callerSends { super.closeDescriptor(fd) }
    }

    override func didClose() {
        awaitingWritable = false
        shared.withLockUnchecked { state in
            state.phase = .closed
            state.loop = nil
            state.pending.clear()
        }
    }
}
