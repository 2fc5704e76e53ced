import CEpoll
import CachetIO
import CachetStore
import CachetWire
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// One I/O queue: a serial `DispatchQueue` with a `DispatchSourceRead` over an epoll descriptor of its own.
///
/// When the epoll descriptor turns readable, the source's handler drains every ready connection
/// (`epoll_wait` with timeout 0), so Dispatch's per-event toll (a hand-off from its manager thread to a
/// worker, and re-arming the descriptor: several system calls and a thread switch) is paid once per batch
/// rather than once per connection.
///
/// Connections are registered edge-triggered, so that they are served in the order their requests arrived.
/// Level-triggered, `epoll_wait` puts every connection it returns straight back on its ready list, ahead
/// of those whose requests arrive while the batch is served: a connection answered in one batch whose
/// next request came quickly went first again in the next batch, and one that became ready meanwhile
/// waited behind it, sometimes for two rounds. With 16 KiB values on 8 connections at pipeline 1, the p99
/// was 2.4–2.7 times the median level-triggered and 1.4–1.7 times edge-triggered (BENCHMARKS.md).
///
/// Edge-triggered, a connection is reported again only when new bytes arrive, so the loop must leave none
/// behind: it reads until a short read (and on to the end of the stream once `EPOLLRDHUP` says the peer
/// has closed), and a connection it stops reading early (the per-event read cap) is registered again
/// (`rearm`), which makes the kernel check it at once. A connection that stops reading because of its
/// phase (waiting for its output to drain, for memory or for the disk; see `Connection.Phase`) is checked
/// the same way when it takes `EPOLLIN` back. Which events a connection is registered for is decided in
/// one place, `Connection.interest(for:outputPending:)`, from its phase, and `settle` applies it after
/// every event, completion and wake-up.
///
/// Lingering: when a batch has been served and nothing else is ready, the handler waits up to
/// `lingerMilliseconds` in `epoll_wait` on its own set before returning. While requests keep coming the
/// worker thread stays in the loop and the kernel wakes it directly, as in a single-threaded event loop;
/// after that much quiet it hands the set back to the source. Work queued for the loop from elsewhere
/// (new connections, disk completions, drain and stop) goes through ``execute(_:)``, which also signals an
/// eventfd in the epoll set, so a lingering handler returns at once and lets `queue` run it.
///
/// Disk dispatch (a GET that missed memory, a PUT for the disk tier, CLEAR) is in `EventLoop+Disk.swift`.
///
/// `@unchecked Sendable`: every mutable property is touched only on `queue`; other threads reach the loop
/// only through ``execute(_:)``.
final class EventLoop: @unchecked Sendable {
    let index: Int
    let queue: DispatchQueue
    let epollFD: Int32
    /// An eventfd in the epoll set, signalled by ``execute(_:)``.
    private let wakeFD: Int32
    private static let wakeToken = UInt64.max
    /// The token of the peer loop's epoll descriptor in this loop's set (see ``forwarder``).
    private static let peerToken = UInt64.max - 1
    private let lingerMilliseconds: Int32
    /// Reads of one connection per event before the loop moves on to the others.
    private static let readsPerEvent = 8
    var source: (any DispatchSourceRead)?
    private let events: UnsafeMutablePointer<epoll_event>
    private let eventCapacity: Int32 = 256
    // Unchecked for the reason given on `Connection`: read on every event, touched only on `queue`.
    @exclusivity(unchecked) var connections: [Connection?] = []
    @exclusivity(unchecked) var freeSlots: [Int] = []
    @exclusivity(unchecked) var generation: UInt64 = 0
    let processor: RequestProcessor
    /// The processor's router, for the cluster-wide fan-out.
    let router: ForwardRouter?
    /// The connections to other members for forwarded requests; nil on a node that never forwards. Its
    /// loop runs on this loop's queue, and its epoll descriptor is in this loop's set, so that a reply
    /// from a peer ends a linger in `epoll_wait` at once.
    let forwarder: PeerForwarder?
    /// Seconds between probes of the peers, on the loop that probes for the node (nil on the others).
    private let probeInterval: Duration?
    private let outputLimit: Int
    let logger: Logger
    let onClose: @Sendable () -> Void
    @exclusivity(unchecked) var draining = false
    var drainedCallback: (@Sendable () -> Void)?
    var drainDeadline = DispatchTime(uptimeNanoseconds: 0)
    var drainServingEnds = DispatchTime(uptimeNanoseconds: 0)
    var drainQuietPeriod: DispatchTimeInterval = .milliseconds(100)
    /// The budget shared by every loop's connections.
    let memory: ConnectionMemory
    /// `memory.releases` when waiting connections were last retried.
    var seenReleases = 0
    /// Connections in the `closing` phase.
    var closingCount = 0
    /// Connections counted as waiting for memory (see `settle`).
    var waitingForMemory = 0
    /// How long a graceful close may wait for the peer to close after the last reply.
    let closeLinger: Double
    /// Nanoseconds a connection may hold budget without progress while others wait for memory before it
    /// is closed (`--client-stall-timeout`); 0 never closes one.
    let stallTimeout: UInt64
    /// Since when (a `DispatchTime` in nanoseconds) connections have waited for memory without a break, as
    /// this loop saw it; 0 while none waits.
    var exhaustedSince: UInt64 = 0
    /// When connections were last checked for stalls (a `DispatchTime` in nanoseconds).
    var lastStallScan: UInt64 = 0
    /// How often, at most, connections are checked for stalls while others wait for memory.
    static let stallScanInterval: UInt64 = 100_000_000
    /// Input bytes a graceful close throws away before it gives up waiting for the peer.
    static let discardLimit = 64 << 20
    static let housekeepingInterval = DispatchTimeInterval.milliseconds(10)
    var housekeepingTimer: (any DispatchSourceTimer)?

    /// The number of open connections, read on `queue`.
    var connectionCount: Int { connections.count - freeSlots.count }

    init(
        index: Int,
        processor: RequestProcessor,
        router: ForwardRouter? = nil,
        outputLimit: Int,
        memory: ConnectionMemory,
        closeLinger: Double = 2,
        stallTimeout: Double = 0,
        forwardTimeout: Double? = nil,
        health: NodeHealth? = nil,
        probeInterval: Double? = nil,
        lingerMilliseconds: Int,
        logger: Logger,
        onClose: @escaping @Sendable () -> Void
    ) throws(CachetNodeError) {
        let fd = cachet_epoll_create()
        guard fd >= 0 else {
            throw CachetNodeError(
                code: .resourceExhausted,
                message: "epoll_create1 failed: \(String(cString: strerror(errno)))"
            )
        }
        let wakeFD = cachet_eventfd_create()
        guard wakeFD >= 0, cachet_epoll_add(fd, wakeFD, cachet_EPOLLIN, Self.wakeToken) == 0 else {
            let message = "eventfd failed: \(String(cString: strerror(errno)))"
            if wakeFD >= 0 { _ = Glibc.close(wakeFD) }
            _ = Glibc.close(fd)
            throw CachetNodeError(code: .resourceExhausted, message: message)
        }
        self.index = index
        self.epollFD = fd
        self.wakeFD = wakeFD
        self.lingerMilliseconds = Int32(lingerMilliseconds)
        let queue = DispatchQueue(label: "cachet.io.\(index)", qos: .userInitiated)
        self.queue = queue
        if let forwardTimeout {
            do throws(CachetIOError) {
                let forwarder = try PeerForwarder(
                    queue: queue,
                    index: index,
                    timeout: .nanoseconds(Int64(forwardTimeout * 1e9)),
                    maximumReplyLength: processor.maximumPayloadLength,
                    health: health,
                    logger: logger
                )
                guard cachet_epoll_add(fd, forwarder.loop.epollDescriptor, cachet_EPOLLIN, Self.peerToken) == 0 else {
                    throw CachetIOError(code: .resourceExhausted, message: "epoll_ctl(ADD) failed: errno \(errno)")
                }
                self.forwarder = forwarder
            } catch {
                _ = Glibc.close(wakeFD)
                _ = Glibc.close(fd)
                throw CachetNodeError(code: .resourceExhausted, message: "peer connections: \(error.message)")
            }
        } else {
            forwarder = nil
        }
        self.events = cachet_epoll_events_create(eventCapacity)
        self.processor = processor
        self.probeInterval = probeInterval.map { .nanoseconds(Int64($0 * 1e9)) }
        self.router = router
        self.outputLimit = outputLimit
        self.memory = memory
        self.closeLinger = closeLinger
        self.stallTimeout = UInt64(max(0, stallTimeout) * 1e9)
        var logger = logger
        logger[metadataKey: "io.loop"] = "\(index)"
        self.logger = logger
        self.onClose = onClose
    }

    deinit {
        cachet_epoll_events_free(events)
        if let source {
            // The cancel handler closes the descriptors.
            source.cancel()
        } else {
            _ = Glibc.close(wakeFD)
            _ = Glibc.close(epollFD)
        }
    }

    /// Runs `work` on the loop's queue, waking the handler if it is lingering in `epoll_wait`.
    /// - Parameter work: what to run; it may touch the loop's state.
    func execute(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
        cachet_eventfd_signal(wakeFD)
    }

    /// Runs `work` on the loop's queue and waits for it. Never call this from the loop's queue.
    /// - Parameter work: what to run; it may touch the loop's state.
    func executeAndWait(_ work: () -> Void) {
        cachet_eventfd_signal(wakeFD)
        queue.sync(execute: work)
    }

    /// Starts watching the epoll descriptor.
    func start() {
        let source = DispatchSource.makeReadSource(fileDescriptor: epollFD, queue: queue)
        source.setEventHandler { [unowned self] in self.drainReadyConnections() }
        // Close only once Dispatch has let go of the descriptor: closing earlier lets its number be reused
        // (by another loop's epoll set, a socket) while Dispatch still watches the old registration, and
        // the new descriptor would never report an event.
        let epollFD = epollFD
        let wakeFD = wakeFD
        source.setCancelHandler {
            _ = Glibc.close(wakeFD)
            _ = Glibc.close(epollFD)
        }
        source.activate()
        self.source = source
        if let forwarder {
            let processor = processor
            forwarder.dropLocalCopies = { keys in processor.dropStandInCopies(keys) }
            forwarder.start(probeInterval: probeInterval)
        }
        if stallTimeout > 0 {
            // A connection that starts waiting on another loop may be waiting for this loop's connections.
            memory.onWaitingStarted { [weak self] in
                self?.execute { [weak self] in self?.scheduleHousekeeping() }
            }
        }
    }

    /// Starts the housekeeping timer unless it runs. It runs only while some connection waits for memory or
    /// closes, or the loop drains, so an idle node is not woken for nothing.
    func scheduleHousekeeping() {
        guard housekeepingTimer == nil else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + Self.housekeepingInterval, repeating: Self.housekeepingInterval)
        timer.setEventHandler { [unowned self] in self.housekeep() }
        timer.activate()
        housekeepingTimer = timer
    }

    /// Serves every connection the epoll set reports ready, until a wait finds nothing.
    private func drainReadyConnections() {
        var timeout: Int32 = 0
        while true {
            let count = cachet_epoll_wait(epollFD, events, eventCapacity, timeout)
            if count < 0 && errno == EINTR { continue }
            // Nothing ready (after a linger, nothing came): hand the set back to the source.
            if count <= 0 { return }
            var woken = false
            let now = CachetClock.now()
            for i in 0..<count {
                let token = cachet_epoll_event_token(events, i)
                if token == Self.wakeToken {
                    cachet_eventfd_reset(wakeFD)
                    woken = true
                    continue
                }
                if token == Self.peerToken {
                    // The peer loop has replies: return to the queue so that its source runs.
                    woken = true
                    continue
                }
                let mask = cachet_epoll_event_mask(events, i)
                let slot = Int(token & 0xffff_ffff)
                guard slot < connections.count, let connection = connections[slot], connection.token == token else {
                    continue
                }
                handle(connection, mask: mask, now: now)
            }
            // Work waits on `queue`: return so that it runs; the source fires again for what is still ready.
            if woken { return }
            if count == eventCapacity {
                timeout = 0
                continue
            }
            // Having just served requests, wait for the next ones here rather than be woken again through
            // Dispatch's manager thread.
            guard lingerMilliseconds > 0, !draining else { return }
            timeout = lingerMilliseconds
        }
    }

    private func handle(_ connection: Connection, mask: UInt32, now: UInt32) {
        if mask & cachet_EPOLLERR != 0 {
            close(connection)
            return
        }
        if mask & cachet_EPOLLOUT != 0 {
            guard send(connection) else { return }
        }
        let peerClosed = mask & (cachet_EPOLLRDHUP | cachet_EPOLLHUP) != 0
        if mask & (cachet_EPOLLIN | cachet_EPOLLRDHUP | cachet_EPOLLHUP) != 0 {
            if connection.wantsRead {
                receive(connection, peerClosed: peerClosed, now: now)
            } else if peerClosed {
                peerClosedWhileWaiting(connection)
            }
        }
        if mask & cachet_EPOLLHUP != 0 && !connection.isClosed && connection.output.readableBytes == 0 {
            // Both directions are gone: nothing can be sent or received any more.
            close(connection)
            return
        }
        settle(connection, now: now)
    }

    /// Reads what is available, answers whole frames, and sends the replies. While a large PUT is being
    /// received in place, reads go straight into its entry, up to its last byte; while closing, what is
    /// read is thrown away.
    ///
    /// Stops at a short read (the socket is drained), unless the peer has closed its side, in which case it
    /// reads on to the end of the stream, which no later event would report. Stops also after
    /// `readsPerEvent` reads, so one busy connection cannot hold up the others; then the connection is
    /// marked for re-arming, since no new edge would report the bytes left. Stops as soon as the
    /// connection's phase is one that does not read.
    func receive(_ connection: Connection, peerClosed: Bool, now: UInt32) {
        var reads = 0
        while reads < Self.readsPerEvent {
            reads += 1
            switch connection.phase {
            case .reading(let frameLength):
                guard connection.prepareInput(frameLength: frameLength) else {
                    connection.phase = .waitingForMemory(.input(frameLength: frameLength))
                    // This event's hang-up would not be reported again.
                    if peerClosed { peerClosedWhileWaiting(connection) }
                    return
                }
                let result = connection.readOnce()
                guard case .data = result else { return endRead(connection, result) }
                if draining { connection.lastReceived = DispatchTime.now() }
                let full = connection.input.writableBytes == 0
                process(connection, now: now)
                if !full && !peerClosed { return }
            case .receivingValue(let direct):
                let result = connection.readValue(into: direct)
                guard case .data = result else { return endRead(connection, result) }
                if draining { connection.lastReceived = DispatchTime.now() }
                if direct.isComplete {
                    connection.phase = .reading(frameLength: 0)
                    processor.completeDirectPut(direct, output: &connection.output, now: now)
                    connection.requestsTaken &+= 1
                    process(connection, now: now)
                } else if !peerClosed {
                    // Fewer bytes than the value lacks: the socket is drained for now.
                    return
                }
            case .closing(var closing):
                let (result, count) = connection.discardOnce()
                guard case .data = result else { return endRead(connection, result) }
                closing.discarded += count
                connection.phase = .closing(closing)
                if closing.discarded > Self.discardLimit {
                    close(connection)
                    return
                }
            default:
                return
            }
        }
        // Still reading, so the cap ended the loop: there may be more.
        if connection.wantsRead { connection.rearm = true }
    }

    /// A read that brought no bytes: the socket is drained for now, or the stream has ended (a partial
    /// frame, or a large value still arriving, is dropped without a reply, and the older value, if any,
    /// stays; a closing connection notes that its peer is done), or it failed.
    private func endRead(_ connection: Connection, _ result: Connection.ReadResult) {
        switch result {
        case .data, .wouldBlock:
            return
        case .endOfStream:
            if case .closing(var closing) = connection.phase {
                closing.peerEnded = true
                connection.phase = .closing(closing)
            } else {
                connection.phase = .finishing
            }
        case .failed(let code):
            readFailed(connection, code)
        }
    }

    private func readFailed(_ connection: Connection, _ code: Int32) {
        logger.debug("read failed", metadata: ["connection.fd": "\(connection.fd)", "error.errno": "\(code)"])
        close(connection)
    }

    /// The peer closed its side while the connection was not reading. One that waits for memory to grow
    /// its input for a frame whose missing bytes are no longer all in the socket can never complete it:
    /// it is closed now (as at any end of stream inside a frame), so that a peer that leaves half a frame
    /// behind does not hold its memory. Every other phase goes on: the peer may still read its replies.
    private func peerClosedWhileWaiting(_ connection: Connection) {
        guard case .waitingForMemory(.input(let frameLength)) = connection.phase else { return }
        let missing = frameLength - connection.input.readableBytes
        if frameLength == 0 || connection.unreadSocketBytes < missing {
            connection.phase = .finishing
        }
    }

    /// The pending output above which a connection's requests wait for its peer to read: the output limit
    /// (4 MiB), or, when the memory budget's share for replies is short, what the output buffer holds
    /// without growing beyond that share, less 2 KiB for one more small reply (GET replies of 1 KiB and
    /// more are checked against the budget one by one). So a client that pipelines
    /// small requests and never reads is held to its buffer as it is, not to the output limit.
    @inline(__always)
    private func pendingOutputLimit(_ connection: Connection, room: Int) -> Int {
        min(outputLimit, connection.output.capacity + room) - 2048
    }

    /// Answers the whole frames in the input and tries to send the replies. Called with the connection
    /// in a reading phase; leaves it in the phase the input calls for.
    func process(_ connection: Connection, now: UInt32) {
        let replyRoom = memory.replyRoom
        let result = processor.process(
            input: &connection.input,
            output: &connection.output,
            outputLimit: pendingOutputLimit(connection, room: replyRoom),
            // A connection whose replies have all been sent may queue one of ordinary size whatever the
            // budget says (see `ConnectionMemory`).
            outputCapacityLimit: max(
                connection.output.capacity + replyRoom,
                connection.output.readableBytes == 0 ? ConnectionMemory.fairAllowance : 0
            ),
            now: now,
            directSend: DirectSend(fd: connection.fd)
        )
        switch result {
        case .needMoreBytes(let frameLength):
            // Every request it had sent is answered (none is left half-sent): progress, for
            // `evictStalledConnections`.
            if frameLength == 0 { connection.requestsTaken &+= 1 }
            connection.phase = .reading(frameLength: frameLength)
        case .outputFull:
            connection.phase = .waitingForOutput
        case .memoryFull:
            connection.phase = .waitingForMemory(.reply)
        case .closeAfterReply:
            beginClosing(connection)
        case .suspended(let operation):
            connection.phase = .waitingForCompletion
            start(operation, for: connection)
        case .receivingValue(let direct):
            connection.phase = .receivingValue(direct)
        }
        _ = send(connection)
    }

    /// Sends pending output; returns false if the connection was closed.
    func send(_ connection: Connection) -> Bool {
        guard !connection.isClosed else { return false }
        if case .failed(let code) = connection.flush() {
            logger.debug("send failed", metadata: ["connection.fd": "\(connection.fd)", "error.errno": "\(code)"])
            close(connection)
            return false
        }
        return true
    }

    /// Brings a connection to a phase that waits for something, then its epoll registration and memory
    /// charge up to date. The one place after every event, completion and wake-up that decides what the
    /// connection waits for:
    /// - a connection waiting for its output to drain whose output has drained answers the requests it
    ///   holds (and so reads again, or waits for something else);
    /// - a finishing connection whose replies are all sent closes;
    /// - a closing connection whose replies are all sent shuts down its write side, and closes once the
    ///   peer has ended its stream too.
    /// Then the interest is derived from the phase (``Connection/interest(for:outputPending:)``). A
    /// registration that changes, or is renewed for `rearm`, makes the kernel check the socket again and
    /// report it if it is ready: that is how bytes left unread while reading was paused or capped get read.
    func settle(_ connection: Connection, now: UInt32) {
        while true {
            switch connection.phase {
            case .waitingForOutput
            where connection.output.readableBytes <= pendingOutputLimit(connection, room: memory.replyRoom):
                connection.phase = .reading(frameLength: 0)
                process(connection, now: now)
                continue
            case .finishing where connection.output.readableBytes == 0:
                close(connection)
                return
            case .closing(var closing) where connection.output.readableBytes == 0:
                if !closing.writeShut {
                    _ = Glibc.shutdown(connection.fd, Int32(SHUT_WR))
                    closing.writeShut = true
                    connection.phase = .closing(closing)
                }
                if closing.peerEnded {
                    close(connection)
                    return
                }
            case .closed:
                return
            default:
                break
            }
            break
        }
        connection.trimBuffers(tight: memory.replyRoom == 0)
        let waiting = connection.phase.isWaitingForMemory
        if waiting != connection.countedAsWaiting {
            connection.countedAsWaiting = waiting
            memory.countPaused(waiting ? 1 : -1)
            waitingForMemory += waiting ? 1 : -1
            if waiting { scheduleHousekeeping() }
        }
        let desired = Connection.interest(for: connection.phase, outputPending: connection.output.readableBytes > 0)
        if desired != connection.interest || connection.rearm {
            connection.interest = desired
            connection.rearm = false
            _ = cachet_epoll_modify(epollFD, connection.fd, desired | cachet_EPOLLET, connection.token)
        }
    }
}
