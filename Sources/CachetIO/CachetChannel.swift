import CEpoll

#if canImport(Glibc)
import Glibc
#endif

/// One connection hosted by a ``CachetEventLoop``, inbound (accepted, then ``CachetEventLoop/register(_:fd:)``)
/// or outbound (``CachetEventLoop/connect(_:to:timeout:)``): its socket, its buffers, and the handler
/// methods the loop calls.
///
/// Subclass it and override the `channel…` methods; the loop calls them on its queue. The loop reads into
/// ``input`` and calls ``channelRead()``, which consumes what it can (moving the read index) and leaves a
/// partial frame in place; replies or requests are appended with ``write(_:)-(UnsafeRawBufferPointer)`` and
/// sent with ``flush()``, which arms `EPOLLOUT` only when the socket is full.
///
/// Why a class with overridable methods and not a protocol or closures: the loop keeps its channels in an
/// array of this one class and calls the handler through the class's vtable, which costs an indirect call
/// and nothing else per event: no existential box, no retain of a closure context, no allocation. A
/// generic loop over a handler type would avoid even the indirect call but would fix one handler type per
/// loop (the node needs inbound connections and outbound forwarding channels on the same loop).
///
/// `@unchecked Sendable`: a channel is handed to its loop across threads once (by the code that creates
/// it), and afterwards every property is read and written only on the loop's queue; callers elsewhere use
/// ``CachetEventLoop/execute(_:)``.
///
/// No run-time exclusivity checks on the properties used on every event: such a check on a class property
/// (two runtime calls per access) was a large part of the node's instructions per small GET
/// (BENCHMARKS.md, "Figures behind choices in the code"). `@exclusivity(unchecked)` turns it off only for accesses compiled in this
/// module, so what subclasses in other modules use (``fd``, ``state``, ``input``, ``output``) is reached
/// through inlinable accessors: the buffers live in memory the channel allocates, behind addressors, and
/// the descriptor and state behind getters of unchecked storage. The single-queue rule is what keeps
/// accesses from overlapping; no code holds an `inout` to one of them across a call that could reach the
/// same property.
open class CachetChannel: @unchecked Sendable {
    /// Where a channel is in its life.
    public enum State: Sendable, Hashable {
        /// Created, not yet given to a loop.
        case idle
        /// An outbound connect is under way.
        case connecting
        /// Connected (or accepted) and registered: reads and writes flow.
        case active
        /// Closed; the descriptor is gone.
        case closed
    }

    /// The socket, -1 before the channel is registered or once it is closed.
    public final var fd: Int32 {
        @inlinable get { _fd }
    }
    /// Bytes received and not yet consumed by ``channelRead()``.
    public final var input: CachetByteBuffer {
        @inlinable unsafeAddress { UnsafePointer(buffers) }
        @inlinable unsafeMutableAddress { buffers }
    }
    /// Bytes written and not yet sent.
    public final var output: CachetByteBuffer {
        @inlinable unsafeAddress { UnsafePointer(buffers + 1) }
        @inlinable unsafeMutableAddress { buffers + 1 }
    }
    /// Where the channel is in its life.
    public final var state: State {
        @inlinable get { _state }
    }

    @usableFromInline @exclusivity(unchecked) final var _fd: Int32 = -1
    @usableFromInline @exclusivity(unchecked) final var _state: State = .idle
    /// The input at 0 and the output at 1, allocated with the channel and freed in its `deinit`.
    @usableFromInline final let buffers: UnsafeMutablePointer<CachetByteBuffer>
    /// The loop hosting the channel; nil before it is registered and once it is closed.
    public final internal(set) var eventLoop: CachetEventLoop?
    /// The address of an outbound channel (as given to connect), or nil for an inbound one.
    public final internal(set) var remoteAddress: String?

    /// Whether the loop reads from the socket; see ``pauseReading()``.
    public final private(set) var isReadingPaused = false

    /// The socket may hold bytes that no edge will report: the last read filled all the room it was given,
    /// or the per-event read cap stopped reading. Set by the loop from every read's result, so only a read
    /// that comes back short (the socket drained) clears it; a channel that stops reading with it set, and
    /// reads again later, renews its registration (``updateInterest(rearm:)``) so that the kernel reports
    /// the bytes left.
    public final var unreadBytesPossible: Bool {
        @inlinable get { _unreadBytesPossible }
        @inlinable set { _unreadBytesPossible = newValue }
    }
    @usableFromInline @exclusivity(unchecked) final var _unreadBytesPossible = false

    /// Bumped whenever ``sendOutput()`` hands the kernel bytes: a peer that does not read its replies
    /// leaves it unchanged.
    public final var sendProgress: UInt32 {
        @inlinable get { _sendProgress }
    }
    @usableFromInline @exclusivity(unchecked) final var _sendProgress: UInt32 = 0

    // Loop bookkeeping.
    @exclusivity(unchecked) final var token: UInt64 = 0
    @usableFromInline @exclusivity(unchecked) final var interest: UInt32 = 0

    /// The epoll events the channel is registered for now (``activeEvents`` when it was last brought up to
    /// date): a server that derives its interest itself compares with it and calls
    /// ``CachetEventLoop/updateInterest(of:rearm:)`` only on a change. Read on the loop's queue.
    public final var registeredEvents: Events {
        @inlinable get { Events(rawValue: interest) }
    }
    final var connectTimer: CachetTimerID?
    final var pendingAddresses: [CachetSocketAddress] = []
    final var lastConnectError: CachetIOError?

    /// Creates a channel.
    /// - Parameters:
    ///   - inputCapacity: the input buffer's initial size.
    ///   - outputCapacity: the output buffer's initial size.
    public init(inputCapacity: Int = 16 << 10, outputCapacity: Int = 16 << 10) {
        buffers = .allocate(capacity: 2)
        buffers.initialize(to: CachetByteBuffer(capacity: inputCapacity))
        (buffers + 1).initialize(to: CachetByteBuffer(capacity: outputCapacity))
    }

    deinit {
        buffers.deinitialize(count: 2)
        buffers.deallocate()
    }

    // MARK: - Handler methods (override; called on the loop's queue)

    /// The connection is established (outbound) or registered (inbound). Output written before is sent
    /// right after this returns.
    open func channelActive() {}

    /// New bytes are in ``input``. Consume whole frames (move the read index); leave partial ones.
    open func channelRead() {}

    /// The output that could not be sent at once has all been sent.
    open func channelWritable() {}

    /// The channel is closed: by ``close(error:)`` (with its error, nil for a plain close), by the peer
    /// (`connectionClosed`), by a failed or timed-out connect (`connectionRefused`, `timedOut`,
    /// `connectionFailed`), or by the loop stopping (`loopStopped`). Called once; the descriptor is
    /// already closed. Not called for a channel that never reached the loop.
    open func channelInactive(error: CachetIOError?) {}

    // MARK: - The serving loop and its hooks (for servers that read in their own way)

    /// The epoll events reported for a channel.
    public struct Events: OptionSet, Sendable, Hashable {
        /// The epoll mask.
        public var rawValue: UInt32
        /// Creates events from an epoll mask.
        /// - Parameter rawValue: the mask.
        @inlinable public init(rawValue: UInt32) { self.rawValue = rawValue }
        // Linux's values, written out so that they are constants in the modules that use them (which need
        // not import CEpoll); CachetIOTests checks them against the kernel header's.
        /// `EPOLLIN`: bytes to read.
        @inlinable public static var readable: Events { Events(rawValue: 0x001) }
        /// `EPOLLOUT`: room to send.
        @inlinable public static var writable: Events { Events(rawValue: 0x004) }
        /// `EPOLLRDHUP`: the peer has closed its sending side (what is left to read ends the stream).
        @inlinable public static var readHangup: Events { Events(rawValue: 0x2000) }
        /// `EPOLLHUP`: both directions are closed.
        @inlinable public static var hangup: Events { Events(rawValue: 0x010) }
        /// `EPOLLERR`: the socket has an error.
        @inlinable public static var error: Events { Events(rawValue: 0x008) }
    }

    /// Handles the events of an active channel: the loop's one serving loop (see ``readRoom()`` and the
    /// hooks after it for what a channel that reads in its own way overrides). Overridden only by channels
    /// that are not connections (a listening socket) or that add to every event.
    /// - Parameters:
    ///   - events: what epoll reported.
    ///   - loop: the loop calling (the channel's ``eventLoop``, passed so that the call reads no reference).
    open func handleEvents(_ events: Events, on loop: CachetEventLoop) {
        loop.serve(self, mask: events.rawValue)
    }

    /// Where the loop reads next: room for at least one byte, or nil to stop reading for now (the channel
    /// must then see to the bytes it leaves: ``unreadBytesPossible``). Asked before every read, so a
    /// channel that stops wanting to read while it handles one is not read again. The default is nil while
    /// ``wantsToRead`` is false, else the free room of ``input``, grown to at least 4 KiB; a server that reads a large value straight into its final
    /// memory, or throws bytes away while it closes, gives that room instead.
    open func readRoom() -> UnsafeMutableRawBufferPointer? {
        guard wantsToRead else { return nil }
        input.reserveWritable(Self.minimumReadRoom)
        return UnsafeMutableRawBufferPointer(start: input.writePointer, count: input.writableBytes)
    }

    /// `count` bytes were read into the room ``readRoom()`` gave. The default adds them to ``input`` and
    /// calls ``channelRead()``.
    open func channelReceived(_ count: Int) {
        input.moveWriteIndex(forwardBy: count)
        channelRead()
    }

    /// The peer ended its stream. Returns whether the loop closes the channel now (the default, with a
    /// `connectionClosed` error); a server that still has replies to send returns false and closes it
    /// itself once they have gone.
    open func channelInputEnded() -> Bool { true }

    /// The peer closed its sending side (`EPOLLRDHUP`), or both directions are gone (`hangup`,
    /// `EPOLLHUP`); called after this event's reads, if any. The default does nothing: a reading channel
    /// reads the end of the stream. A channel that is not reading may have to act (it will not read it).
    open func channelPeerClosed(hangup: Bool) {}

    /// The event has been handled: bring the registration up to date (the default, renewing it when
    /// `rearm`: the per-event read cap left bytes unread). A server that derives its interest from a state
    /// of its own settles that state here.
    open func channelEventsHandled(rearm: Bool) {
        eventLoop?.settle(self, rearm: rearm)
    }

    /// Free room below which ``readRoom()``'s default grows the input before a read.
    static let minimumReadRoom = 4096

    /// Whether the channel wants to be told about bytes to read; consulted by ``activeEvents``' default.
    /// The default is `!isReadingPaused`; override to derive it from the channel's own state (output
    /// blocked, waiting for the disk...).
    open var wantsToRead: Bool { !isReadingPaused }

    /// The events an active channel is registered for; consulted whenever the registration is brought up
    /// to date. The default asks for ``Events/readable`` and ``Events/readHangup`` while ``wantsToRead``,
    /// and for ``Events/writable`` while output is pending. A server whose connections decide their
    /// interest from a state of their own (registered for `readHangup` alone while waiting for the disk,
    /// say) overrides it. Errors and hang-ups are always reported.
    open var activeEvents: Events {
        Events(
            rawValue: (wantsToRead ? cachet_EPOLLIN | cachet_EPOLLRDHUP : 0)
                | (output.readableBytes > 0 ? cachet_EPOLLOUT : 0)
        )
    }

    /// Brings the channel's epoll registration up to date with ``wantsToRead`` and pending output.
    /// - Parameter rearm: renew the registration even if unchanged, which makes the kernel report the
    ///   socket again at once if it still holds bytes (after a read stopped early).
    public final func updateInterest(rearm: Bool = false) {
        guard state == .active, let loop = eventLoop else { return }
        loop.settle(self, rearm: rearm)
    }

    // MARK: - Operations (call on the loop's queue)

    /// Whether the channel is connected and registered.
    @inlinable public final var isActive: Bool { _state == .active }

    /// Whether the channel is closed (its descriptor is gone).
    @inlinable public final var isClosed: Bool { _state == .closed }

    /// Appends bytes to the output; ``flush()`` sends them.
    /// - Parameter bytes: what to send.
    public final func write(_ bytes: UnsafeRawBufferPointer) { output.append(bytes) }

    /// Appends bytes to the output; ``flush()`` sends them.
    /// - Parameter bytes: what to send.
    public final func write(_ bytes: [UInt8]) { output.append(bytes) }

    /// Sends as much output as the socket takes now, and watches for writability if some is left. Before
    /// the channel is active, does nothing (the output goes out once it is).
    public final func flush() {
        guard state == .active, let loop = eventLoop else { return }
        loop.flush(self)
    }

    /// Stops reading from the socket (backpressure); bytes stay in the kernel.
    public final func pauseReading() {
        guard !isReadingPaused else { return }
        isReadingPaused = true
        if state == .active { eventLoop?.settle(self) }
    }

    /// Reads again after ``pauseReading()``.
    public final func resumeReading() {
        guard isReadingPaused else { return }
        isReadingPaused = false
        if state == .active { eventLoop?.settle(self, rearm: true) }
    }

    /// Closes the channel at once (unsent output is dropped) and calls ``channelInactive(error:)``.
    /// - Parameter error: why, passed on to ``channelInactive(error:)``; nil for a plain close.
    public final func close(error: CachetIOError? = nil) {
        guard state != .closed else { return }
        if let loop = eventLoop {
            loop.close(self, error: error)
        } else {
            _state = .closed
        }
    }

    // MARK: - Socket I/O (call on the loop's queue)
    //
    // Every read and write of a channel's socket goes through these, the loop's own serving and the
    // servers that read in their own way alike, so that what a transport adds (encryption, accounting) is
    // added here once.

    /// Reads once from the socket into `buffer`, retried on EINTR.
    /// - Parameters:
    ///   - buffer: where to read to.
    ///   - count: the room in `buffer`.
    /// - Returns: what happened.
    public final func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> CachetSocket.IOResult {
        stream.read(into: buffer, count: count)
    }

    /// Sends bytes once, bypassing ``output`` (what the socket does not take is the caller's to keep).
    /// - Parameter bytes: what to send.
    /// - Returns: what happened (`.bytes` may be fewer than offered).
    public final func transmit(_ bytes: UnsafeRawBufferPointer) -> CachetSocket.IOResult {
        stream.write(bytes)
    }

    /// Sends a header and a body in one call, bypassing ``output`` (a reply and its value, without copying
    /// the value): only when ``output`` is empty, so that the bytes keep their order.
    /// - Parameters:
    ///   - header: the first bytes.
    ///   - body: the bytes after them.
    /// - Returns: what happened (`.bytes` may be fewer than offered).
    public final func transmit(_ header: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer)
        -> CachetSocket.IOResult
    {
        stream.write(header, body)
    }

    /// What ``sendOutput()`` did.
    public enum OutputProgress: Sendable, Equatable {
        /// The output is empty now; this many bytes went in this call (0 when it was empty already).
        case drained(sent: Int)
        /// The socket is full; this many bytes went in this call, the rest waits for `EPOLLOUT`.
        case partial(sent: Int)
        /// The send failed with this errno value (EPIPE, ECONNRESET...).
        case failed(Int32)
    }

    /// Sends as much of ``output`` as the socket takes now, without touching the registration (what
    /// ``flush()`` does besides).
    /// - Returns: how far it got.
    public final func sendOutput() -> OutputProgress {
        if _transformsOutput { prepareOutput() }
        var sent = 0
        defer { if _transformsOutput && sent > 0 { outputSent(sent) } }
        while output.readableBytes > 0 {
            switch transmit(output.readableRegion) {
            case .bytes(let count):
                output.moveReadIndex(forwardBy: count)
                if sent == 0 { _sendProgress &+= 1 }
                sent += count
            case .wouldBlock, .endOfStream:
                return .partial(sent: sent)
            case .failed(let code):
                return .failed(code)
            }
        }
        return .drained(sent: sent)
    }

    /// Whether ``prepareOutput()`` runs before each send and ``outputSent(_:)`` after it: for a channel whose
    /// output is written in one form and sent in another (a protocol front end that translates replies).
    /// False by default, which costs a send one test (of unchecked storage: no exclusivity check).
    public final var transformsOutput: Bool {
        @inlinable get { _transformsOutput }
        set { _transformsOutput = newValue }
    }
    @usableFromInline @exclusivity(unchecked) final var _transformsOutput = false

    /// Called before each send when ``transformsOutput`` is set: turns what was appended to ``output`` since
    /// the last call into the bytes to send.
    open func prepareOutput() {}

    /// Called after a send that took `count` bytes from the front of ``output``, when ``transformsOutput`` is
    /// set.
    open func outputSent(_ count: Int) {}

    /// Ends the sending side (the peer reads the end of the stream after what was sent); reading goes on.
    public final func shutdownOutput() {
        guard _fd >= 0 else { return }
        stream.shutdownOutput()
    }

    /// Bytes received and not read yet: the kernel's, not ``input``'s (with TLS, the decrypted bytes
    /// OpenSSL holds and the kernel's still encrypted ones).
    public final var unreadBytes: Int {
        guard _fd >= 0 else { return 0 }
        return stream.unreadBytes
    }

    /// The channel's socket as bytes cross it (``CachetStream``: plain, or through ``tls``). Made per call:
    /// a plain channel reads no reference for it (the one test is ``_usesTLS``).
    @inline(__always)
    public final var stream: CachetStream {
        CachetStream(fd: _fd, tls: _usesTLS ? tls.unsafelyUnwrapped : nil)
    }

    // MARK: - TLS

    /// The channel's TLS session, once its socket is known (``useTLS(_:)``); nil for a plain channel.
    @exclusivity(unchecked) public final private(set) var tls: CachetTLSSession?
    /// Whether ``tls`` is set: the one test every read and write of a plain channel pays.
    @usableFromInline @exclusivity(unchecked) final var _usesTLS = false

    /// Whether the channel speaks TLS (cheap: no reference counting, unlike reading ``tls``).
    public final var usesTLS: Bool {
        @inlinable get { _usesTLS }
    }

    /// How the channel is registered: edge-triggered (`EPOLLET`) for a plain socket, which every reader
    /// drains (a short read means the socket is empty); level-triggered for a TLS one, whose reads stop
    /// after the bytes one `recv` brought (draining would cost a `recv` that finds nothing, per request):
    /// epoll reports a socket that still holds bytes again.
    final var triggerMode: UInt32 { _usesTLS ? 0 : cachet_EPOLLET }
    /// The context the session is made from when the channel gets its socket.
    final var tlsContext: CachetTLSContext?

    /// Makes the channel speak TLS (the context's side of the handshake) from its first byte: call before
    /// registering or connecting it. Every read and write then goes through the session.
    /// - Parameter context: the server's or the client's context.
    public final func useTLS(_ context: CachetTLSContext) {
        precondition(state == .idle, "TLS is chosen before the channel has a socket")
        tlsContext = context
    }

    /// The session handed over by ``useTLS(session:)``, taken by the loop when the channel is registered.
    final var handedTLSSession: CachetTLSSession?

    /// Makes the channel speak TLS through a session already made on the socket it is to be registered
    /// with (its handshake done, by a tool that connects and shakes hands before the load, so that no
    /// request waits for it): call before ``CachetEventLoop/register(_:fd:isNonBlocking:)``.
    /// - Parameter session: the session, made for that socket.
    public final func useTLS(session: CachetTLSSession) {
        precondition(state == .idle, "TLS is chosen before the channel has a socket")
        handedTLSSession = session
    }

    /// Called by the loop when the channel gets its socket: the TLS session, if the channel uses TLS.
    /// Returns false when OpenSSL cannot make one.
    final func startTLS(fd: Int32) -> Bool {
        if let session = handedTLSSession {
            handedTLSSession = nil
            tls = session
            _usesTLS = true
            return true
        }
        guard let context = tlsContext else { return true }
        do throws(CachetIOError) {
            tls = try context.session(for: fd)
            _usesTLS = true
            return true
        } catch {
            return false
        }
    }

    // MARK: - Hooks for the channel kinds of this module (CachetSharedChannel)

    /// Called by the loop right before ``channelActive()``.
    func didBecomeActive() {}

    /// Closes the socket the loop lets go of (already out of the epoll set): on a failed connect attempt and
    /// on close. ``CachetSharedChannel`` leaves the close to a thread that is still sending on it.
    /// - Parameter fd: the socket.
    func closeDescriptor(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Called by the loop once the channel is closed, right before ``channelInactive(error:)``.
    func didClose() {}

    /// The epoll events the channel needs now.
    final var desiredInterest: UInt32 {
        switch state {
        case .connecting: return cachet_EPOLLOUT | cachet_EPOLLIN | cachet_EPOLLRDHUP
        case .active: return activeEvents.rawValue
        case .idle, .closed: return 0
        }
    }
}
