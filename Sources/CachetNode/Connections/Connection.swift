import CachetIO
import CachetStore
import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// One client connection: a channel of its loop's ``CachetEventLoop`` (which owns the socket, the epoll
/// registration and the buffers) with the node's state for it.
///
/// Touched only on its event loop's queue. The connection reads and sends through its channel's I/O
/// (``CachetChannel/receive(into:count:)``, ``CachetChannel/sendOutput()``) and leaves protocol work to
/// ``RequestProcessor``; the serving loop's hooks (``readRoom()``, ``channelReceived(_:)``...) go to its
/// ``NodeIOQueue``. What the
/// connection is doing is one value, ``phase``; the epoll events it is registered for are derived from it in
/// one place, ``interest(for:outputPending:)``, so that no state can leave a live connection waiting for
/// nothing.
///
/// `@unchecked Sendable`: a disk completion carries the reference through the disk queue, but every
/// property is read and written only on the owning loop's queue (completions hop back with `NodeIOQueue.execute`).
///
/// `@exclusivity(unchecked)`: the stored properties are touched on every request, and the run-time
/// exclusivity check on a class property (a thread-local access set, two runtime calls per access) was a
/// large part of the node's instructions per small GET (BENCHMARKS.md, "Figures behind choices in the code"). The single-queue
/// rule above is what keeps accesses from overlapping; no code holds an `inout` to one of these across a
/// call that could reach the same property.
final class Connection: CachetChannel, @unchecked Sendable {
    /// What a connection is doing, and so what it waits for.
    enum Phase {
        /// Reading requests and answering every whole one. `frameLength` is the length of the partial
        /// frame at the head of the input, 0 while not even its length prefix has arrived. Waits for the
        /// socket to become readable.
        case reading(frameLength: Int)
        /// Reading a large PUT's value straight into its entry. Waits for the socket to become readable.
        case receivingValue(DirectPut)
        /// The output holds more than the connection's limit; the input may hold requests not yet
        /// answered. Not reading. Waits for the socket to become writable (the peer to read).
        case waitingForOutput
        /// The input must grow, or the next reply be queued, and the connections' memory budget has no
        /// room (``ConnectionMemory``). Not reading. Woken by the loop once memory has been returned.
        case waitingForMemory(MemoryWait)
        /// A request waits for the disk queue, or for a cluster-wide fan-out. Not reading. Woken by the
        /// operation's completion.
        case waitingForCompletion
        /// Forwards of this connection's requests are in flight up to their bound, or the replies held
        /// behind them are (``ForwardPipeline``). Not reading. Woken by a forward's completion.
        case waitingForForwards
        /// The peer has ended its stream: every whole request was answered; what is queued is sent, then
        /// the connection closes. Waits for the socket to become writable.
        case finishing
        /// The node closes the connection (a fatal frame, shutdown): nothing more is answered, what is
        /// queued is sent, then the write side is shut down (FIN) while input is read and thrown away until
        /// the peer closes or a bound is reached, so that the kernel never resets the connection while
        /// replies are unread.
        case closing(Closing)
        case closed
    }

    /// Why a connection waits for memory.
    enum MemoryWait: Equatable {
        /// The partial frame at the head of the input (of this length) needs a larger input buffer.
        case input(frameLength: Int)
        /// The request at the head of the input has a reply that does not fit.
        case reply
    }

    /// The graceful close's progress.
    struct Closing {
        /// When to close even if the peer has not (a `DispatchTime` in nanoseconds).
        var deadline: UInt64
        /// `shutdown(SHUT_WR)` has been done: every reply was sent.
        var writeShut = false
        /// The peer has ended its stream.
        var peerEnded = false
        /// Input bytes thrown away so far.
        var discarded = 0
    }

    /// The loop whose connection this is. Used by every hook of the serving loop, where a retain and
    /// release of the loop cost more than the rest of the event's dispatch (BENCHMARKS.md, "Figures behind
    /// choices in the code"), so it is a strong, non-optional `let`: the compiler reads it without a retain
    /// while the connection is being called, and inlines the loop's handlers into the hooks (an
    /// `Optional`, or an `Unmanaged` used through a closure, each cost a retain or a call per event). The loop holds its connections only
    /// while they are registered, so the two do not keep each other alive.
    private let owner: NodeIOQueue
    let memory: ConnectionMemory
    /// Whether the connection counts as open (STATS `connections_current`); a connection answered
    /// UNAVAILABLE and closing does not.
    let counted: Bool
    @exclusivity(unchecked) var phase: Phase = .reading(frameLength: 0)
    /// What the connection may send (its user, on a node with an auth file).
    @exclusivity(unchecked) var access = ConnectionAccess.open
    /// The replies held in order while forwards of this connection's requests are in flight; nil while none
    /// is (replies then go straight to the output).
    @exclusivity(unchecked) var forwards: ForwardPipeline?
    /// The connection's WATCH, while it watches (``ConnectionWatching``).
    @exclusivity(unchecked) var watch: WatchStream?
    /// A GET's reply being sent in several frames, while it is (``ValueFrames``).
    @exclusivity(unchecked) var valueFrames: ValueFrames?
    /// A connection on the memcached port: its text turned into native requests, and their replies back
    /// (``MemcacheSession``); nil on the other ports.
    @exclusivity(unchecked) var memcache: MemcacheSession? {
        didSet { transformsOutput = memcache != nil || http != nil }
    }
    /// A connection on an HTTP port: its requests turned into native requests, and their replies back
    /// (``HTTPSession``); nil on the other ports. (Two typed properties rather than one existential: the
    /// memcached port's path measured 96 instructions a GET more through `any TranslatingSession`, and 128
    /// more through an enum of the two.)
    @exclusivity(unchecked) var http: HTTPSession? {
        didSet { transformsOutput = memcache != nil || http != nil }
    }
    /// Whether this connection is counted among those waiting for memory (brought up to date by the
    /// loop when it settles or closes the connection).
    @exclusivity(unchecked) var countedAsWaiting = false
    /// A block that processes the rest of its input is queued (see `NodeIOQueue.yieldTurn`).
    @exclusivity(unchecked) var turnQueued = false
    /// It sent a part of a value sent in parts: its uploads are given up when it closes.
    @exclusivity(unchecked) var sentParts = false
    /// What this connection's buffers are charged to `memory`.
    @exclusivity(unchecked) var charged = ConnectionMemory.BufferCharge()
    /// The input capacity reserved in the budget for the frame being received (0 when none is): the
    /// whole frame is charged as soon as the input must grow for it, although the buffer grows only as
    /// its bytes arrive, so that connections sharing the last of the budget cannot each hold part of a
    /// frame and none be able to complete it.
    @exclusivity(unchecked) var inputReserved = 0
    /// Bumped whenever every request received has been answered (the input holds no partial frame): a
    /// client that holds part of a frame and does not finish it leaves it unchanged.
    @exclusivity(unchecked) var requestsTaken: UInt32 = 0
    /// When the loop's latest turn on this connection began (``CachetDeadline/now()``): requests that wait
    /// for the disk, a peer or a fan-out are timed from it (``RequestLatencies``).
    @exclusivity(unchecked) var turnStarted: UInt64 = 0
    /// The command of the request the connection waits for (``NodeIOQueue/wait(for:_:)``).
    @exclusivity(unchecked) var waitingCommand = LatencyCommand.other
    /// The two counters when the loop last looked, and since when (`DispatchTime`s in nanoseconds) each
    /// has not changed; kept up to date only while connections wait for memory.
    @exclusivity(unchecked) var repliesSeen: UInt32 = 0
    @exclusivity(unchecked) var requestsSeen: UInt32 = 0
    @exclusivity(unchecked) var repliesStalledSince: UInt64 = 0
    @exclusivity(unchecked) var requestsStalledSince: UInt64 = 0

    /// The size each buffer starts at, and shrinks back to. Small, so that idle connections cost little
    /// (two such buffers per connection: 10,000 idle connections hold 80 MiB of them at most); a request
    /// or reply that needs more grows them, within the budget.
    static let initialBufferSize = 4 * 1024
    /// Free room below which the input is compacted or grown before a read.
    static let minimumReadRoom = 2048
    /// An empty input buffer up to this size is kept between requests (pipelined PUTs of a few KiB refill
    /// it at once); a larger one shrinks back once it has passed its frames.
    static let retainedInputSize = 64 * 1024
    /// A memcached connection keeps an input up to this size: its sets carry their data blocks in it (a
    /// native client's large PUT is received into its entry instead), and regrowing it for every set of
    /// 1 MB cost a third of the port's rate. Charged to the budget; given back when memory runs short
    /// (``ConnectionUpkeep``).
    static let retainedTextInputSize = 2 << 20
    /// An empty output buffer up to this size is kept, so that pipelined replies of mid-sized values do
    /// not pay for a fresh allocation (and its page faults) each time; a larger one shrinks back once sent.
    static let retainedOutputSize = 256 * 1024

    /// - Parameters:
    ///   - owner: the loop that hosts it.
    ///   - memory: the budget its buffers are charged to.
    ///   - counted: whether it counts as open (STATS `connections_current`).
    init(owner: NodeIOQueue, memory: ConnectionMemory, counted: Bool = true) {
        self.owner = owner
        self.memory = memory
        self.counted = counted
        super.init(inputCapacity: Self.initialBufferSize, outputCapacity: Self.initialBufferSize)
    }

    // MARK: - Channel handlers (on the loop's queue)

    override var wantsToRead: Bool { wantsRead }

    override func readRoom() -> UnsafeMutableRawBufferPointer? {
        owner.readRoom(self)
    }

    override func channelReceived(_ count: Int) {
        owner.received(count, on: self)
    }

    override func channelInputEnded() -> Bool {
        owner.inputEnded(self)
        return false
    }

    override func prepareOutput() {
        if let memcache {
            memcache.translateReplies(in: &output)
        } else {
            http?.translateReplies(in: &output)
        }
    }

    override func outputSent(_ count: Int) {
        if let memcache {
            memcache.outputSent(count)
        } else {
            http?.outputSent(count)
        }
    }

    override func channelWritable() {
        // A watcher whose peer read goes on with the changes it was not sent yet.
        if watch != nil { owner.watching.drain(self, settling: false) }
    }

    override func channelPeerClosed(hangup: Bool) {
        owner.peerClosed(self, hangup: hangup)
    }

    override func channelEventsHandled(rearm: Bool) {
        owner.settle(self, now: owner.loop.batchSeconds)
    }

    override var activeEvents: Events {
        Events(rawValue: Self.interest(for: phase, outputPending: output.readableBytes > 0, levelTriggered: usesTLS))
    }

    override func channelInactive(error: CachetIOError?) {
        if let error { owner.connectionFailed(self, error) }
        owner.connectionClosed(self)
    }

    /// Readable, or the peer has closed its side: `EPOLLRDHUP` tells a short read that left the end of
    /// the stream behind (it needs one more read) from one that drained the socket.
    static let readInterest = Events.readable.rawValue | Events.readHangup.rawValue

    /// The epoll events a connection in `phase` needs: the one place that decides them.
    ///
    /// Every live phase is registered for at least `EPOLLRDHUP` (and the kernel always reports errors and
    /// hang-ups), and each phase that waits on its socket is registered for what it waits for: reading
    /// phases for `EPOLLIN`, the others for `EPOLLOUT`. `EPOLLOUT` is asked for whenever output is pending,
    /// and always while waiting for the output to drain, so that even an empty output wakes the connection.
    /// Only `waitingForMemory`, `waitingForCompletion` and `waitingForForwards` wait on something else, and
    /// those are woken by the loop.
    /// A TLS connection is registered level-triggered (see `CachetChannel`): a peer's half-close would be
    /// reported on every turn while the connection does not read, so it is watched only while reading.
    static func interest(for phase: Phase, outputPending: Bool, levelTriggered: Bool = false) -> UInt32 {
        let write = outputPending ? Events.writable.rawValue : 0
        let hangUp = levelTriggered ? 0 : Events.readHangup.rawValue
        switch phase {
        case .reading, .receivingValue, .closing: return readInterest | write
        case .waitingForOutput: return hangUp | Events.writable.rawValue
        case .waitingForMemory, .waitingForCompletion, .waitingForForwards, .finishing:
            return hangUp | write
        case .closed: return 0
        }
    }

    /// Whether the loop should read from the socket. Never once the connection is closed: a send that
    /// fails while a batch is answered closes it, and its descriptor number may already belong to a new
    /// connection.
    var wantsRead: Bool {
        switch phase {
        case .reading, .receivingValue, .closing: return true
        default: return false
        }
    }

    /// Buffer bytes held or reserved now beyond the initial buffers (what the budget counts), a session's own
    /// buffers included.
    var footprint: Int { bufferCharge.total }

    /// ``footprint`` as the budget charges it: input (and the frame reserved for), and output.
    var bufferCharge: ConnectionMemory.BufferCharge {
        ConnectionMemory.BufferCharge(
            input: max(input.capacity, inputReserved) - Self.initialBufferSize,
            replies: output.capacity - Self.initialBufferSize + sessionFootprint
        )
    }

    /// What the buffers of the connection's session (memcached's or HTTP) have grown by.
    @inline(__always)
    var sessionFootprint: Int {
        guard transformsOutput else { return 0 }
        return memcache?.bufferFootprint ?? http?.bufferFootprint ?? 0
    }

    /// Everything this connection holds of the budget: its buffers, a large PUT arriving in place and the
    /// replies held behind forwards in flight.
    var heldBytes: Int {
        let held = footprint + (forwards?.charged ?? 0)
        if case .receivingValue(let put) = phase { return held + put.reserved }
        return held
    }

    /// Brings the budget's charge for ``forwards`` up to date.
    func chargeForwards() {
        guard let forwards else { return }
        let footprint = forwards.footprint
        if footprint != forwards.charged {
            memory.charge(footprint - forwards.charged, for: .replies)
            forwards.charged = footprint
        }
    }

    /// Drops ``forwards`` and returns its charge to the budget.
    func dropForwards() {
        guard let forwards else { return }
        memory.charge(-forwards.charged, for: .replies)
        forwards.charged = 0
        self.forwards = nil
    }

    /// Whether the connection waits for nothing: no request partly received, no reply unsent, reading.
    var isIdle: Bool {
        guard case .reading(frameLength: 0) = phase else { return false }
        return input.readableBytes == 0 && output.readableBytes == 0
    }

    /// Gives back buffer memory no longer needed (empty or nearly empty buffers grown past their retained
    /// size; down to the initial size while the budget is exhausted) and brings the budget's charge up to
    /// date. `tight` is evaluated only when there is something to trim.
    @inline(__always)
    func trimBuffers(tight: @autoclosure () -> Bool) {
        // The common case: initial buffers, nothing charged.
        if charged.total == 0 && input.capacity == Self.initialBufferSize && output.capacity == Self.initialBufferSize
            && sessionFootprint == 0
        {
            return
        }
        trimLargeBuffers(tight: tight())
    }

    private func trimLargeBuffers(tight: Bool) {
        let inputKept =
            tight ? Self.initialBufferSize : memcache == nil ? Self.retainedInputSize : Self.retainedTextInputSize
        var frameLength = 0
        switch phase {
        case .reading(let length), .waitingForMemory(.input(let length)): frameLength = length
        default: break
        }
        let held = max(input.readableBytes, frameLength)
        // The frame reserved for has passed.
        if inputReserved > 0 && held + Self.minimumReadRoom < inputReserved { inputReserved = 0 }
        if input.capacity > inputKept {
            if held <= input.capacity / 4 {
                input.resize(to: max(Self.initialBufferSize, input.readableBytes + Self.minimumReadRoom))
            }
        }
        let outputKept = tight ? Self.initialBufferSize : Self.retainedOutputSize
        if output.readableBytes == 0 && output.capacity > outputKept {
            output.resize(to: Self.initialBufferSize)
        }
        if transformsOutput {
            memcache?.trimBuffers(tight: tight)
            http?.trimBuffers(tight: tight)
        }
        updateCharge()
    }

    /// Brings the budget's charge for the buffers up to date.
    func updateCharge() {
        let now = bufferCharge
        if now != charged {
            memory.recharge(from: charged, to: now)
            charged = now
        }
    }

    /// Makes room in the input for the next read: compacts, or grows by what the partial frame of
    /// `frameLength` bytes still lacks (at least `minimumReadRoom`, at most one growth step of the buffer,
    /// never towards the length a frame merely claims). Returns false when growing needs memory the
    /// budget does not have.
    @inline(__always)
    func prepareInput(frameLength: Int) -> Bool {
        if input.writableBytes >= Self.minimumReadRoom { return true }
        return makeInputRoom(frameLength: frameLength)
    }

    private func makeInputRoom(frameLength: Int) -> Bool {
        let missing = frameLength - input.readableBytes
        if missing > 0 && input.writableBytes >= missing { return true }
        input.compact()
        if input.writableBytes >= Self.minimumReadRoom || (missing > 0 && input.writableBytes >= missing) {
            return true
        }
        let step = min(
            max(missing, Self.minimumReadRoom),
            max(input.capacity, Self.minimumReadRoom),
            CachetByteBuffer.largestGrowthStep
        )
        let newCapacity = input.readableBytes + max(step, Self.minimumReadRoom)
        let target = max(newCapacity, frameLength)
        let held = max(input.capacity, inputReserved)
        if target > held {
            // Up to the fair allowance whatever the budget says (see `ConnectionMemory`).
            let beyondFair = { (bytes: Int) in max(0, bytes - ConnectionMemory.fairAllowance) }
            guard memory.allowsRequest(beyondFair(target) - beyondFair(held)) else { return false }
            inputReserved = target
            updateCharge()
        }
        input.resize(to: newCapacity)
        return true
    }
}

extension Connection.Phase {
    var isWaitingForMemory: Bool {
        if case .waitingForMemory = self { return true }
        return false
    }
}
