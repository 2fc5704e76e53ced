import CachetIO
import CachetWire
import Synchronization

/// The client's share of the transport: one `CachetEventLoop` hosting every connection of the client
/// (``ClientChannel``s), and a periodic tick on the same loop that times requests out and probes down
/// nodes.
///
/// Requests are written by the calling threads (``ConnectionSlot``, through `CachetSharedChannel`);
/// replies are read and decoded, and callers resumed, on the loop's queue, without a task hop. The loop
/// is a serial queue of its own, not the global concurrent queue: that pool is the one Swift's tasks run
/// on, and a process whose tasks block every thread of it must still have its replies read and its
/// timeouts fired.
///
/// The tick runs on the loop's timers, every `tick` (a fiftieth of the shortest timeout, 1 to 10 ms: the
/// most a timeout can be late by), while anything needs it (requests waited for, a connect, a node marked
/// down); after a run of idle ticks it stops, and the next request starts it again. One scan per tick
/// rather than a timer per request, so that a request allocates no timer.
///
/// Nothing starts in `init`: the loop starts with the first request, and ``close()`` stops it.
///
/// The streams of changes (``NodeWatch``) run on the same loop; the transport keeps the watches that are
/// going, so that ``close()`` ends them even while they wait on a timer (a stopped loop drops its timers).
///
/// `@unchecked Sendable`: `nodes` and `tickWork` are set by ``install(nodes:)`` before any request and
/// cleared by ``close()`` on the loop's queue, where they are read; `idleTicks` and `watches` are touched
/// on the loop's queue only; the flags are atomics.
final class ClientTransport: @unchecked Sendable {
    let loop: CachetEventLoop
    /// The TLS client context every connection uses (``CachetClient/Configuration/tls``); nil for plain TCP.
    let tls: CachetTLSContext?
    /// The AUTH request every new connection sends first (``CachetClient/Configuration/credentials``); nil
    /// for none.
    let authRequest: [UInt8]?
    private let tickInterval: Duration
    private(set) var nodes: [NodeClient] = []
    private var tickWork: (() -> Void)?
    /// The watches going, by identity.
    private var watches: [ObjectIdentifier: NodeWatch] = [:]
    /// Consecutive ticks that found nothing to do.
    private var idleTicks = 0
    /// Idle ticks after which the tick stops.
    private let idleTicksBeforeStopping: Int
    private let started = Atomic<Bool>(false)
    private let closed = Atomic<Bool>(false)
    /// Whether the tick is scheduled (or about to be); read without a lock on the request path.
    private let tickArmed = Atomic<Bool>(false)

    /// Creates the loop (not started).
    /// - Parameters:
    ///   - label: the loop's queue label.
    ///   - tick: the tick's period.
    ///   - linger: how long the loop waits for more replies after reading some; rounded up to whole
    ///     milliseconds, the loop's unit.
    /// - Throws: ``CachetClientError`` `connectionFailed` when the loop's descriptors cannot be created.
    init(
        label: String,
        tick: Duration,
        linger: Duration,
        tls: CachetTLSContext? = nil,
        credentials: CachetClient.Credentials? = nil
    ) throws(CachetClientError) {
        self.tls = tls
        authRequest = credentials.map {
            CachetCommand.auth(user: Array($0.user.utf8), secret: Array($0.secret.utf8)).encoded(id: 0)
        }
        do {
            let nanoseconds = linger.nanoseconds
            loop = try CachetEventLoop(
                label: label,
                lingerMilliseconds: Int((nanoseconds + 999_999) / 1_000_000)
            )
        } catch {
            throw CachetClientError(
                code: .connectionFailed,
                message: "could not create the client's event loop (\(error.message)): raise the process's "
                    + "open-file limit",
                underlying: error
            )
        }
        tickInterval = max(.milliseconds(1), tick)
        idleTicksBeforeStopping = max(4, Int(100_000_000 / max(1, tickInterval.nanoseconds)))
    }

    /// Sets the nodes the tick looks after; called once before any request.
    func install(nodes: [NodeClient]) {
        self.nodes = nodes
        // One closure for every tick, so that scheduling the next one allocates nothing. It holds the
        // transport, which holds it: ``close()`` lets go of it.
        tickWork = { self.tick() }
    }

    /// Changes the nodes the tick looks after (the cluster's membership changed): those of the topology in
    /// force and those replaced whose connections are still open. Called on the loop's queue.
    func replace(nodes: [NodeClient]) {
        guard tickWork != nil else { return }
        self.nodes = nodes
    }

    /// Starts the loop the first time a connection needs it.
    @inline(__always)
    func startIfNeeded() {
        if started.load(ordering: .relaxed) { return }
        if started.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged { loop.start() }
    }

    /// Makes sure the tick runs: called whenever a request, a connect or a probe needs a deadline.
    @inline(__always)
    func armTick() {
        if tickArmed.load(ordering: .relaxed) { return }
        guard tickArmed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        startIfNeeded()
        loop.execute { self.scheduleTick() }
    }

    private func scheduleTick() {
        guard let tickWork else { return }
        loop.schedule(after: tickInterval, tickWork)
    }

    /// Times requests out and probes down nodes (on the loop); schedules the next tick while needed.
    private func tick() {
        // Replies that have arrived are read before deadlines are judged, so that a tick running late (or
        // before the loop's read handler) does not time out a request whose reply is already here.
        loop.handleReadyEvents()
        let now = monotonicNanoseconds()
        for node in nodes { node.tick(now: now) }
        if nodes.contains(where: \.needsTimer) {
            idleTicks = 0
            scheduleTick()
            return
        }
        idleTicks += 1
        if idleTicks < idleTicksBeforeStopping {
            scheduleTick()
            return
        }
        idleTicks = 0
        tickArmed.store(false, ordering: .relaxed)
        // A request issued before the store may have seen the tick armed and not armed it: look once more.
        // (A request issued after the check takes a slot's lock that this check took after the store, so
        // it sees the tick disarmed and arms it.)
        if nodes.contains(where: \.needsTimer),
            tickArmed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
        {
            scheduleTick()
        }
    }

    /// Counts a watch as going, so that ``close()`` ends it. Called on the loop's queue.
    func add(_ watch: NodeWatch) {
        watches[ObjectIdentifier(watch)] = watch
    }

    /// Forgets a watch that ended. Called on the loop's queue.
    func remove(_ watch: NodeWatch) {
        watches[ObjectIdentifier(watch)] = nil
    }

    /// The watches going (for tests). Read on the loop's queue.
    var watchCount: Int { watches.count }

    /// Stops the loop (once): every connection still open closes, and its callers fail with `shutdown`.
    /// Then, unless called on the loop's queue, waits for the work queued before and by the stop (the
    /// report of a channel whose connect was still queued), so that it runs while the nodes and slots it
    /// reports to are alive.
    ///
    /// It also lets go of the tick's closure and of the nodes: the closure holds the transport, and the
    /// transport would otherwise outlive its client with the nodes, their slots and the loop. Streams of
    /// changes end with `shutdown`: those whose connection was open did as the loop stopped, those waiting
    /// to connect again do here.
    func close() {
        if !closed.exchange(true, ordering: .relaxed) { loop.stop() }
        loop.executeAndWait {
            tickWork = nil
            nodes = []
            let ending = watches.values
            watches = [:]
            for watch in ending { watch.clientClosed() }
        }
    }
}
