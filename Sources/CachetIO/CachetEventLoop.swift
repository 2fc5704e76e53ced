import CEpoll
public import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// Identifies a timer scheduled on a ``CachetEventLoop``, to cancel it.
public struct CachetTimerID: Hashable, Sendable {
    let value: UInt64
}

/// One I/O queue: a serial `DispatchQueue` with a `DispatchSourceRead` over an epoll descriptor of its own,
/// hosting inbound and outbound ``CachetChannel``s alike, plus timers.
///
/// When the epoll descriptor turns readable, the source's handler drains every ready channel (`epoll_wait`
/// with timeout 0) before returning, so Dispatch's per-event toll (a hand-off from its manager thread and
/// a re-arm) is paid once per batch rather than once per connection (docs/transport.md; BENCHMARKS.md,
/// "Figures behind choices in the code"). Channels are registered edge-triggered: each is read until a short read
/// (a capped one is registered again so the kernel reports it at once), and served in the order their
/// bytes arrived.
///
/// Lingering (optional): after a batch, the handler waits up to `lingerMilliseconds` in `epoll_wait` on its
/// own set before returning, so a busy loop is woken by the kernel directly. ``execute(_:)`` signals an
/// eventfd in the set, so a lingering handler returns at once and queued work runs. With
/// ``lingersThroughTimers``, timers due meanwhile run on time and the handler lingers on.
///
/// Timers (``schedule(after:_:)``) are kept in a heap; one `DispatchSourceTimer` is set to the earliest,
/// and a lingering handler waits no longer than it (`CachetEventLoop+Timers.swift`). Outbound connects are in
/// `CachetEventLoop+Connect.swift`, the standard serving of a channel's I/O in `CachetEventLoop+Serving.swift`.
///
/// Threading: ``register(_:fd:)``, ``connect(_:to:timeout:)``, ``schedule(after:_:)``, the channel
/// operations and the handler calls happen on ``queue``; from elsewhere, go through ``execute(_:)``.
/// The loop keeps itself alive while started; ``stop()`` closes every channel and releases it.
///
/// `@unchecked Sendable`: every mutable property is touched only on `queue`; other threads reach the loop
/// only through ``execute(_:)``, ``executeAndWait(_:)`` and ``stop()``, which hop onto it.
public final class CachetEventLoop: @unchecked Sendable {
    /// The serial queue every handler runs on.
    public let queue: DispatchQueue
    private let epollFD: Int32
    private let wakeFD: Int32
    private static let wakeToken = UInt64.max
    /// How long the handler waits in `epoll_wait` for more events after a batch; 0 returns at once. Set on
    /// `queue` (a server winding down turns it off, so that its queue is free for the drain's work).
    @exclusivity(unchecked) public var lingerMilliseconds: Int32
    /// Whether a lingering handler wakes for each timer at its time (to the nanosecond, with its thread's
    /// timer slack at 1 µs), runs it, and lingers on until `lingerMilliseconds` pass with no event. Off by
    /// default: the linger then ends at the next timer, counted in whole milliseconds (so up to 1 ms
    /// late), and the handler returns after running it. For a loop whose timers send work on a schedule
    /// while it is busy (a load generator's paced requests, whose latencies count from their scheduled
    /// times). Set on `queue`.
    public var lingersThroughTimers = false
    /// Whether the handler is lingering through timers now (it runs them; the timer source waits).
    var isLingeringThroughTimers = false
    private let events: UnsafeMutablePointer<epoll_event>
    private let eventCapacity: Int32 = 256
    private var source: (any DispatchSourceRead)?
    private var started = false
    /// Set once by `stop()`; read by the timers too (`CachetEventLoop+Timers.swift`).
    var stopped = false
    private let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    // Unchecked exclusivity: read on every event, touched only on `queue`, never held across a call that could
    // reach the same property.
    //
    // The channel table holds one retain per registered channel, taken by `adopt` and given back by
    // `release`, so that an event reaches its channel without a retain and release of its own
    // (BENCHMARKS.md, "Figures behind choices in the code"). The table's retain is what keeps a channel alive while the
    // loop calls it: a channel closed while events are being dispatched (by its own handler, or by
    // another's) keeps that retain in `releasedInBatch` until the batch is over.
    @exclusivity(unchecked) private var channels: [Unmanaged<CachetChannel>?] = []
    @exclusivity(unchecked) private var freeSlots: [Int] = []
    @exclusivity(unchecked) private var generation: UInt64 = 0
    /// How many batches are being dispatched (`handleReadyEvents` may run inside a handler's call).
    @exclusivity(unchecked) private var dispatchDepth = 0
    /// The table's retains of channels released while a batch was dispatched.
    @exclusivity(unchecked) private var releasedInBatch: [Unmanaged<CachetChannel>] = []

    // Timers (`CachetEventLoop+Timers.swift`): a binary heap of (deadline, id) and the work of each live timer.
    // Unchecked exclusivity for the same reason as the channels: the heap is looked at after every batch,
    // on `queue` only, and no access is held across a call that could reach it (timers run after their
    // entry has been popped).
    @exclusivity(unchecked) var timerHeap: [(deadline: UInt64, id: UInt64)] = []
    @exclusivity(unchecked) var timerWork: [UInt64: () -> Void] = [:]
    var nextTimerID: UInt64 = 1
    var timerSource: (any DispatchSourceTimer)?
    var timerSourceDeadline: UInt64 = .max

    /// How late Dispatch may fire the loop's timer source, so that it can wake the process less often:
    /// 100 µs by default. A load generator that sends requests on a schedule sets it lower, since its
    /// requests' latencies count from their scheduled times. Set on `queue`, before the timers it is to
    /// apply to.
    public var timerLeeway: DispatchTimeInterval = .microseconds(100)

    /// The wall clock in whole seconds (`CLOCK_REALTIME_COARSE`, as `CachetStore.CachetClock.now()`) when
    /// the batch of events being handled began: handlers that stamp or check expiry times use it instead of
    /// reading the clock per event. Read on `queue`.
    public var batchSeconds: UInt32 {
        @inlinable get { _batchSeconds }
    }
    @usableFromInline @exclusivity(unchecked) var _batchSeconds: UInt32 = 0

    /// The number of registered channels (connecting or active). Read on `queue`.
    public var channelCount: Int { channels.count - freeSlots.count }

    /// Calls `body` with every registered channel, in slot order. `body` may close channels (the one it was
    /// given or others); a channel registered meanwhile may or may not be visited. Called on `queue`.
    /// - Parameter body: what to do with each channel.
    /// - Complexity: O(n) in the slots.
    public func forEachChannel(_ body: (CachetChannel) -> Void) {
        preconditionInEventLoop()
        var slot = 0
        while slot < channels.count {
            if let channel = channels[slot]?.takeUnretainedValue() { body(channel) }
            slot += 1
        }
    }

    /// Creates a loop; ``start()`` begins watching.
    /// - Parameters:
    ///   - label: the queue's label, e.g. `cachet.io.0`.
    ///   - queue: a serial queue to run on, shared with other work that must not run beside the loop's
    ///     handlers; nil creates the loop's own queue from `label` and `qos`.
    ///   - lingerMilliseconds: how long the handler waits for more events after a batch; 0 returns at once.
    ///   - qos: the queue's quality of service.
    /// - Throws: ``CachetIOError`` `resourceExhausted` when epoll or eventfd cannot be created.
    public init(
        label: String,
        queue: DispatchQueue? = nil,
        lingerMilliseconds: Int = 0,
        qos: DispatchQoS = .userInitiated
    ) throws(CachetIOError) {
        let fd = cachet_epoll_create()
        guard fd >= 0 else {
            throw CachetIOError(
                code: .resourceExhausted,
                message: "epoll_create1 failed: \(CachetIOError.describe(errno))",
                systemError: errno
            )
        }
        let wakeFD = cachet_eventfd_create()
        guard wakeFD >= 0, cachet_epoll_add(fd, wakeFD, cachet_EPOLLIN, Self.wakeToken) == 0 else {
            let code = errno
            if wakeFD >= 0 { _ = Glibc.close(wakeFD) }
            _ = Glibc.close(fd)
            throw CachetIOError(
                code: .resourceExhausted,
                message: "eventfd failed: \(CachetIOError.describe(code))",
                systemError: code
            )
        }
        epollFD = fd
        self.wakeFD = wakeFD
        self.lingerMilliseconds = Int32(clamping: lingerMilliseconds)
        self.queue = queue ?? DispatchQueue(label: label, qos: qos)
        events = cachet_epoll_events_create(eventCapacity)
        self.queue.setSpecific(key: queueKey, value: ObjectIdentifier(self))
    }

    deinit {
        cachet_epoll_events_free(events)
        // A registered channel holds its loop (`eventLoop`), so none is left here; given back all the same.
        for case let channel? in channels { channel.release() }
        // Reached only for a loop never started (a started one is kept alive by its source until stop()).
        timerSource?.cancel()
        // The eventfd lives as long as the loop: execute() after stop() (work queued by a stopped loop's
        // last handlers, or a late caller) still signals it, and must never signal a reused number.
        _ = Glibc.close(wakeFD)
        if source == nil { _ = Glibc.close(epollFD) }
    }

    // MARK: - Threading

    /// Whether the caller runs on the loop's queue.
    public var inEventLoop: Bool { DispatchQueue.getSpecific(key: queueKey) == ObjectIdentifier(self) }

    /// Traps unless called on the loop's queue.
    public func preconditionInEventLoop(file: StaticString = #fileID, line: UInt = #line) {
        precondition(inEventLoop, "called off the event loop's queue", file: file, line: line)
    }

    /// Runs `work` on the loop's queue, waking the handler if it is lingering in `epoll_wait`.
    /// - Parameter work: what to run; it may touch the loop's and its channels' state.
    public func execute(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
        cachet_eventfd_signal(wakeFD)
    }

    /// Runs `work` on the loop's queue and waits for it; runs it directly when already on the queue.
    /// - Parameter work: what to run.
    /// - Returns: what `work` returned.
    public func executeAndWait<T>(_ work: () throws -> T) rethrows -> T {
        if inEventLoop { return try work() }
        cachet_eventfd_signal(wakeFD)
        return try queue.sync(execute: work)
    }

    // MARK: - Lifecycle

    /// Starts watching the epoll descriptor. Call once.
    public func start() {
        executeAndWait {
            guard !started, !stopped else { return }
            started = true
            let source = DispatchSource.makeReadSource(fileDescriptor: epollFD, queue: queue)
            // Strong: the loop lives while its source does; stop() cancels it.
            source.setEventHandler { self.drain() }
            // Close only once Dispatch has let go of the descriptor: closing earlier lets the number be
            // reused while Dispatch still watches the old registration. (The eventfd is closed in deinit.)
            let epollFD = epollFD
            source.setCancelHandler { _ = Glibc.close(epollFD) }
            source.activate()
            self.source = source
        }
    }

    /// Closes every channel (their ``CachetChannel/channelInactive(error:)`` gets `loopStopped`), drops
    /// the timers without running them, and stops the source. Callable from any thread; returns once done.
    public func stop() {
        executeAndWait {
            guard !stopped else { return }
            stopped = true
            let error = CachetIOError(code: .loopStopped, message: "the event loop was stopped")
            // By slot, not over a copy of the table: closing one channel may close (and release) another.
            var slot = 0
            while slot < channels.count {
                if let channel = channels[slot]?.takeUnretainedValue() { close(channel, error: error) }
                slot += 1
            }
            timerHeap.removeAll()
            timerWork.removeAll()
            timerSource?.cancel()
            timerSource = nil
            source?.cancel()
        }
    }

    // MARK: - Channels

    /// Adopts a connected socket (an accepted connection): makes it non-blocking and registers it for
    /// reading; ``CachetChannel/channelActive()`` is called at once. On a stopped loop the socket is closed
    /// and the channel gets `loopStopped`. Called on `queue`.
    /// - Parameters:
    ///   - channel: a channel not hosted yet.
    ///   - fd: the socket; the channel owns it from now on.
    ///   - isNonBlocking: the socket is non-blocking already (``CachetSocket/accept(_:)`` makes it so),
    ///     which saves two `fcntl` calls.
    public func register(_ channel: CachetChannel, fd: Int32, isNonBlocking: Bool = false) {
        preconditionInEventLoop()
        precondition(channel.state == .idle, "a channel can be registered once")
        if !isNonBlocking { CachetSocket.setNonBlocking(fd) }
        guard adopt(channel, fd: fd, state: .active) else { return }
        channel.didBecomeActive()
        channel.channelActive()
        if channel.state == .active { flush(channel) }
    }

    /// Puts a channel with a socket into the epoll set. Returns false (and closes) when epoll refuses it.
    func adopt(_ channel: CachetChannel, fd: Int32, state: CachetChannel.State) -> Bool {
        guard channel.startTLS(fd: fd) else {
            CachetSocket.close(fd)
            channel._state = .closed
            channel.channelInactive(
                error: CachetIOError(code: .resourceExhausted, message: "cannot create a TLS session")
            )
            return false
        }
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
        } else {
            slot = channels.count
            channels.append(nil)
        }
        generation &+= 1
        channel.token = UInt64(slot) | (generation << 32)
        channel._fd = fd
        channel.eventLoop = self
        channel._state = state
        channels[slot] = Unmanaged.passRetained(channel)
        channel.interest = channel.desiredInterest
        if stopped || cachet_epoll_add(epollFD, fd, channel.interest | channel.triggerMode, channel.token) != 0 {
            let error =
                stopped
                ? CachetIOError(code: .loopStopped, message: "the event loop was stopped")
                : CachetIOError(
                    code: .resourceExhausted,
                    message: "epoll_ctl(ADD) failed: \(CachetIOError.describe(errno))",
                    systemError: errno
                )
            close(channel, error: error)
            return false
        }
        return true
    }

    // MARK: - Events

    private func drain() {
        var timeout: Int32 = 0
        // While lingering through timers: when the linger ends (monotonic ns); 0 otherwise.
        var lingerEnd: UInt64 = 0
        if lingersThroughTimers { cachet_set_timer_slack_ns(1_000) }
        defer {
            if isLingeringThroughTimers {
                isLingeringThroughTimers = false
                armTimerSource()
            }
        }
        while true {
            let count =
                lingerEnd > 0
                ? waitForEvents(until: lingerEnd) : cachet_epoll_wait(epollFD, events, eventCapacity, timeout)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 {
                runDueTimers()
                // A wait that ended for a timer lingers on (`lingersThroughTimers`).
                if lingerEnd > 0 && !stopped && CachetDeadline.now() < lingerEnd { continue }
                // Nothing ready (after a linger, nothing came): hand the set back to the source.
                return
            }
            _batchSeconds = Self.coarseSeconds()
            var woken = false
            dispatchDepth += 1
            for i in 0..<count {
                let token = cachet_epoll_event_token(events, i)
                if token == Self.wakeToken {
                    cachet_eventfd_reset(wakeFD)
                    woken = true
                    continue
                }
                dispatch(token: token, mask: cachet_epoll_event_mask(events, i))
            }
            endDispatch()
            runDueTimers()
            // Work waits on `queue`: return so that it runs; the source fires again for what is still ready.
            if woken || stopped { return }
            if count == eventCapacity {
                timeout = 0
                lingerEnd = 0
                continue
            }
            guard lingerMilliseconds > 0 else { return }
            if lingersThroughTimers {
                lingerEnd = CachetDeadline.now() + UInt64(lingerMilliseconds) * 1_000_000
                isLingeringThroughTimers = true
                continue
            }
            timeout = lingerMilliseconds
            if let next = timerHeap.first {
                let now = CachetDeadline.now()
                if next.deadline <= now { continue }
                timeout = Int32(clamping: min(UInt64(timeout), (next.deadline - now + 999_999) / 1_000_000))
            }
        }
    }

    /// Waits for events until the next timer is due or `lingerEnd` comes, whichever is first, to the
    /// nanosecond (`epoll_pwait2`; on kernels before 5.11, which lack it, to the millisecond, rounded up).
    private func waitForEvents(until lingerEnd: UInt64) -> Int32 {
        let now = CachetDeadline.now()
        let until = min(lingerEnd, timerHeap.first?.deadline ?? .max)
        let nanoseconds = until > now ? Int64(until - now) : 0
        let count = cachet_epoll_wait_ns(epollFD, events, eventCapacity, nanoseconds)
        guard count < 0 && errno == ENOSYS else { return count }
        return cachet_epoll_wait(epollFD, events, eventCapacity, Int32(clamping: (nanoseconds + 999_999) / 1_000_000))
    }

    private static func coarseSeconds() -> UInt32 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &time)
        return UInt32(truncatingIfNeeded: time.tv_sec)
    }

    /// Handles the channels whose events are ready now, without waiting: for a timer that must see the
    /// bytes that have already arrived before it judges deadlines (a timer can run before the events that
    /// became ready with it). Queued work is left to the next turn. Called on `queue`.
    public func handleReadyEvents() {
        preconditionInEventLoop()
        while !stopped {
            let count = cachet_epoll_wait(epollFD, events, eventCapacity, 0)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return }
            _batchSeconds = Self.coarseSeconds()
            dispatchDepth += 1
            for i in 0..<count {
                let token = cachet_epoll_event_token(events, i)
                // The eventfd stays signalled (level-triggered): the handler sees it and returns for the work.
                if token == Self.wakeToken { continue }
                dispatch(token: token, mask: cachet_epoll_event_mask(events, i))
            }
            endDispatch()
            if count < eventCapacity { return }
        }
    }

    /// Hands one event to its channel, if the channel is still the one the token was issued to. The
    /// table's retain keeps the channel alive during the call (see `channels`).
    @inline(__always)
    private func dispatch(token: UInt64, mask: UInt32) {
        let slot = Int(token & 0xffff_ffff)
        guard slot < channels.count, let entry = channels[slot] else { return }
        entry._withUnsafeGuaranteedRef { channel in
            guard channel.token == token else { return }
            if channel.state == .connecting {
                finishConnect(channel, mask: mask)
                return
            }
            channel.handleEvents(CachetChannel.Events(rawValue: mask), on: self)
        }
    }

    /// Ends a batch's dispatch: gives back the retains of the channels closed during it.
    @inline(__always)
    private func endDispatch() {
        dispatchDepth -= 1
        if dispatchDepth == 0 && !releasedInBatch.isEmpty { releaseClosedInBatch() }
    }

    private func releaseClosedInBatch() {
        // Taken out first: a deinit could close or release other channels.
        var released: [Unmanaged<CachetChannel>] = []
        swap(&released, &releasedInBatch)
        for channel in released { channel.release() }
    }

    /// Brings a channel's epoll registration up to date with its ``CachetChannel/activeEvents`` (what
    /// ``CachetChannel/updateInterest(rearm:)`` does, for a server that keeps its loop at hand). Called on
    /// `queue`.
    /// - Parameters:
    ///   - channel: a channel of this loop.
    ///   - rearm: renew the registration even if unchanged, which makes the kernel report the socket again
    ///     at once if it still holds bytes.
    @inline(__always)
    public func updateInterest(of channel: CachetChannel, rearm: Bool) {
        settle(channel, rearm: rearm)
    }

    /// Brings the channel's epoll registration up to date; `rearm` renews it even if unchanged, which makes
    /// the kernel report a socket that still holds bytes.
    func settle(_ channel: CachetChannel, rearm: Bool = false) {
        guard channel.state == .active || channel.state == .connecting else { return }
        let desired = channel.desiredInterest
        if desired != channel.interest || rearm {
            channel.interest = desired
            _ = cachet_epoll_modify(epollFD, channel.fd, desired | channel.triggerMode, channel.token)
        }
        // Bytes OpenSSL decrypted and holds are no socket's to report: the channel is told again itself.
        if rearm, let tls = channel.tls, tls.pending > 0, desired & cachet_EPOLLIN != 0 {
            execute { [weak channel] in
                guard let channel, channel.state == .active else { return }
                channel.handleEvents(.readable, on: self)
            }
        }
    }

    /// Takes a channel's socket out of the set and closes it; the slot is freed.
    func release(_ channel: CachetChannel) {
        guard channel.fd >= 0 else { return }
        _ = cachet_epoll_remove(epollFD, channel.fd)
        channel.closeDescriptor(channel.fd)
        channel._fd = -1
        let slot = Int(channel.token & 0xffff_ffff)
        if slot < channels.count, let entry = channels[slot],
            entry.toOpaque() == Unmanaged.passUnretained(channel).toOpaque()
        {
            channels[slot] = nil
            freeSlots.append(slot)
            // The caller holds the channel (it was given it), unless the loop is calling it from the table.
            if dispatchDepth > 0 { releasedInBatch.append(entry) } else { entry.release() }
        }
    }

    /// Closes a channel and tells its handler.
    func close(_ channel: CachetChannel, error: CachetIOError?) {
        guard channel.state != .closed else { return }
        if let timer = channel.connectTimer {
            cancelTimer(timer)
            channel.connectTimer = nil
        }
        release(channel)
        channel._state = .closed
        channel.pendingAddresses = []
        channel.didClose()
        channel.channelInactive(error: error)
        channel.eventLoop = nil
    }
}
