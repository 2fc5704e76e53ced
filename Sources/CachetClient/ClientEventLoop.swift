import CEpoll
import CachetIO
import CachetLocking
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The client's event loop: one epoll descriptor watched by one Dispatch read source on a serial queue,
/// whose handler drains every ready connection, and one timer on the same queue that times requests out
/// and probes down nodes. Replies are decoded and their callers resumed on this queue, without a task
/// hop. See `shared notes on Dispatch over epoll` in BENCHMARKS.md for why one source over epoll.
///
/// Nothing starts in `init`: the sources are activated by the first connection, and cancelled by
/// ``close()``.
final class ClientEventLoop: @unchecked Sendable {
    // `slots` is written once, before any connection exists, then read only; the event array is used only
    // on `queue`; `control` is guarded by its mutex.
    let queue: DispatchQueue
    let epollDescriptor: Int32
    private(set) var slots: [ConnectionSlot] = []
    private(set) var nodes: [NodeClient] = []
    private let events: UnsafeMutablePointer<epoll_event>
    private let eventCapacity = 128
    private let readSource: any DispatchSourceRead
    private let timer: any DispatchSourceTimer
    /// The timer's period in nanoseconds: the most a timeout can be late by.
    let tickNanoseconds: UInt64
    /// How long the handler waits for more events after a batch; 0 returns at once.
    let lingerNanoseconds: UInt64
    /// The longest the handler keeps the queue while lingering.
    let maximumLingerRun: UInt64 = 2_000_000

    private struct Control {
        var started = false
        var timerRunning = false
        var closed = false
    }
    private let control = CachetLock(Control())
    /// Whether the timer runs; read without the lock on the issue path to skip arming it.
    private let timerArmed = Atomic<Bool>(false)

    init(label: String, tick: Duration, linger: Duration) throws(CachetClientError) {
        let descriptor = cachet_epoll_create()
        guard descriptor >= 0 else {
            throw CachetClientError(
                code: .connectionFailed,
                message: "could not create an epoll descriptor: raise the process's open-file limit",
                underlying: CachetIOError(code: .resourceExhausted, message: "epoll_create1 failed", systemError: errno)
            )
        }
        epollDescriptor = descriptor
        // Not targeting the global concurrent queue: that pool is the one Swift's tasks run on, and a
        // process whose tasks block every thread of it must still have its replies read and its
        // timeouts fired. One serial queue per client, so no thread explosion.
        queue = DispatchQueue(label: label, qos: .userInitiated)
        events = cachet_epoll_events_create(Int32(eventCapacity))
        readSource = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        timer = DispatchSource.makeTimerSource(queue: queue)
        tickNanoseconds = max(1_000_000, tick.nanoseconds)
        lingerNanoseconds = linger.nanoseconds
    }

    /// Sets the connection slots and nodes; called once before any I/O.
    func install(nodes: [NodeClient]) {
        self.nodes = nodes
        self.slots = nodes.flatMap(\.slots)
        readSource.setEventHandler { [unowned self] in self.drain() }
        timer.setEventHandler { [unowned self] in self.tick() }
        timer.schedule(
            deadline: .now() + .nanoseconds(Int(tickNanoseconds)),
            repeating: .nanoseconds(Int(tickNanoseconds)),
            leeway: .nanoseconds(Int(tickNanoseconds / 4))
        )
    }

    /// Activates the read source the first time a socket is registered.
    private func startIfNeeded() {
        let activate = control.withLock { control -> Bool in
            guard !control.started && !control.closed else { return false }
            control.started = true
            return true
        }
        if activate { readSource.activate() }
    }

    /// Makes sure the timer runs: called whenever a request, a connect or a probe needs a deadline.
    @inline(__always)
    func armTimer() {
        if timerArmed.load(ordering: .relaxed) { return }
        startIfNeeded()
        // Resumed under the lock, so that resumes and suspends alternate exactly as `timerRunning` does
        // (Dispatch traps on a resume of a source that is not suspended).
        control.withLock { control in
            guard !control.timerRunning && !control.closed else { return }
            control.timerRunning = true
            timerArmed.store(true, ordering: .relaxed)
            timer.resume()
        }
    }

    /// Stops the timer when nothing needs it (on `queue`).
    private func disarmTimerIfIdle() {
        for node in nodes where node.needsTimer { return }
        control.withLock { control in
            guard control.timerRunning && !control.closed else { return }
            control.timerRunning = false
            timerArmed.store(false, ordering: .relaxed)
            timer.suspend()
        }
        // A request issued between the check above and the store saw the timer armed and did not arm
        // it: look once more.
        for node in nodes where node.needsTimer {
            armTimer()
            return
        }
    }

    /// Watches `fd` for `events` on behalf of slot `token`'s current socket.
    func register(fd: Int32, events: UInt32, token: UInt64) -> Int32 {
        startIfNeeded()
        return cachet_epoll_add(epollDescriptor, fd, events, token) == 0 ? 0 : errno
    }

    /// Changes what `fd` is watched for.
    func modify(fd: Int32, events: UInt32, token: UInt64) {
        _ = cachet_epoll_modify(epollDescriptor, fd, events, token)
    }

    /// Stops watching `fd` (before it is closed).
    func unregister(fd: Int32) {
        _ = cachet_epoll_remove(epollDescriptor, fd)
    }

    /// Handles every ready socket (on `queue`); then, with a linger, waits that long in `epoll_wait` for
    /// more replies before handing the thread back, so that a busy client's replies are read by a thread
    /// the kernel wakes directly rather than through Dispatch's hand-off (at most ``maximumLingerRun``
    /// per call, so that timers and queued work on `queue` run on time).
    private func drain() {
        let start = lingerNanoseconds > 0 ? monotonicNanoseconds() : 0
        var timeout: Int64 = 0
        while true {
            let count = Int(cachet_epoll_wait_ns(epollDescriptor, events, Int32(eventCapacity), timeout))
            guard count > 0 else {
                guard timeout == 0, lingerNanoseconds > 0, monotonicNanoseconds() &- start < maximumLingerRun else {
                    return
                }
                timeout = Int64(lingerNanoseconds)
                continue
            }
            timeout = 0
            if lingerNanoseconds > 0 && monotonicNanoseconds() &- start >= maximumLingerRun {
                handle(count: count)
                return
            }
            handle(count: count)
            if lingerNanoseconds == 0 && count < eventCapacity { return }
        }
    }

    private func handle(count: Int) {
        for index in 0..<count {
            let mask = cachet_epoll_event_mask(events, Int32(index))
            let token = cachet_epoll_event_token(events, Int32(index))
            let slot = Int(token & 0xffff_ffff)
            guard slot < slots.count else { continue }
            slots[slot].handle(events: mask, generation: UInt32(truncatingIfNeeded: token >> 32))
        }
    }

    /// Times requests and connects out, probes down nodes (on `queue`).
    private func tick() {
        // Replies that have arrived are read before deadlines are judged, so that a timer running late
        // does not time out a request whose reply is already here.
        while true {
            let count = Int(cachet_epoll_wait(epollDescriptor, events, Int32(eventCapacity), 0))
            guard count > 0 else { break }
            handle(count: count)
            if count < eventCapacity { break }
        }
        let now = monotonicNanoseconds()
        for node in nodes { node.tick(now: now) }
        disarmTimerIfIdle()
    }

    /// Cancels the sources and closes the epoll descriptor; the sockets must be closed already.
    func close() {
        let flags = control.withLock { control -> (started: Bool, timerRunning: Bool)? in
            if control.closed { return nil }
            control.closed = true
            return (control.started, control.timerRunning)
        }
        guard let (started, timerRunning) = flags else { return }
        // A suspended source must be resumed before it is cancelled; one never activated must be.
        if !timerRunning { timer.resume() }
        timer.cancel()
        let descriptor = epollDescriptor
        let events = self.events
        readSource.setCancelHandler {
            Glibc.close(descriptor)
            cachet_epoll_events_free(events)
        }
        if !started { readSource.activate() }
        readSource.cancel()
    }
}
