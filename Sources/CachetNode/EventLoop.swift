import CEpoll
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
/// state (output blocked, waiting for the disk) is checked the same way when it takes `EPOLLIN` back.
///
/// Lingering: when a batch has been served and nothing else is ready, the handler waits up to
/// `lingerMilliseconds` in `epoll_wait` on its own set before returning. While requests keep coming the
/// worker thread stays in the loop and the kernel wakes it directly, as in a single-threaded event loop;
/// after that much quiet it hands the set back to the source. Work queued for the loop from elsewhere
/// (new connections, disk completions, drain and stop) goes through ``execute(_:)``, which also signals an
/// eventfd in the epoll set, so a lingering handler returns at once and lets `queue` run it.
///
/// `@unchecked Sendable`: every mutable property is touched only on `queue`; other threads reach the loop
/// only through ``execute(_:)``.
final class EventLoop: @unchecked Sendable {
    let index: Int
    let queue: DispatchQueue
    private let epollFD: Int32
    /// An eventfd in the epoll set, signalled by ``execute(_:)``.
    private let wakeFD: Int32
    private static let wakeToken = UInt64.max
    private let lingerMilliseconds: Int32
    /// Reads of one connection per event before the loop moves on to the others.
    private static let readsPerEvent = 8
    private var source: (any DispatchSourceRead)?
    private let events: UnsafeMutablePointer<epoll_event>
    private let eventCapacity: Int32 = 256
    // Unchecked for the reason given on `Connection`: read on every event, touched only on `queue`.
    @exclusivity(unchecked) private var connections: [Connection?] = []
    @exclusivity(unchecked) private var freeSlots: [Int] = []
    @exclusivity(unchecked) private var generation: UInt64 = 0
    private let processor: RequestProcessor
    private let outputLimit: Int
    private let logger: Logger
    private let onClose: @Sendable () -> Void
    @exclusivity(unchecked) private var draining = false
    private var drainedCallback: (@Sendable () -> Void)?
    private var drainTimer: (any DispatchSourceTimer)?

    /// The number of open connections, read on `queue`.
    var connectionCount: Int { connections.count - freeSlots.count }

    init(
        index: Int,
        processor: RequestProcessor,
        outputLimit: Int,
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
        self.queue = DispatchQueue(label: "cachet.io.\(index)", qos: .userInitiated)
        self.events = cachet_epoll_events_create(eventCapacity)
        self.processor = processor
        self.outputLimit = outputLimit
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
    }

    /// Adopts an accepted socket. Called on `queue`.
    func register(fd: Int32) {
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
        } else {
            slot = connections.count
            connections.append(nil)
        }
        generation &+= 1
        let token = UInt64(slot) | (generation << 32)
        let connection = Connection(fd: fd, token: token)
        connections[slot] = connection
        connection.interest = Connection.readInterest
        if cachet_epoll_add(epollFD, fd, Connection.readInterest | cachet_EPOLLET, token) != 0 {
            logger.warning("epoll_ctl(ADD) failed", metadata: ["connection.fd": "\(fd)", "error.errno": "\(errno)"])
            close(connection)
        }
    }

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
            if connection.outputBlocked && connection.output.readableBytes <= outputLimit {
                connection.outputBlocked = false
                process(connection, now: now)
            }
        }
        if mask & (cachet_EPOLLIN | cachet_EPOLLRDHUP | cachet_EPOLLHUP) != 0 && connection.wantsRead {
            receive(connection, peerClosed: mask & (cachet_EPOLLRDHUP | cachet_EPOLLHUP) != 0, now: now)
        } else if mask & cachet_EPOLLHUP != 0 && connection.output.readableBytes == 0 {
            close(connection)
            return
        }
        settle(connection)
    }

    /// Reads what is available, answers whole frames, and sends the replies. While a large PUT is being
    /// received in place, reads go straight into its entry, up to its last byte.
    ///
    /// Stops at a short read (the socket is drained), unless the peer has closed its side, in which case it
    /// reads on to the end of the stream, which no later event would report. Stops also after
    /// `readsPerEvent` reads, so one busy connection cannot hold up the others; then the connection is
    /// marked for re-arming, since no new edge would report the bytes left.
    private func receive(_ connection: Connection, peerClosed: Bool, now: UInt32) {
        var reads = 0
        while connection.wantsRead && reads < Self.readsPerEvent {
            reads += 1
            let direct = connection.directPut
            let result = direct.map { connection.readValue(into: $0) } ?? connection.readOnce()
            switch result {
            case .data:
                if draining { connection.lastReceived = DispatchTime.now() }
                if let direct {
                    if direct.isComplete {
                        connection.directPut = nil
                        processor.completeDirectPut(direct, output: &connection.output, now: now)
                        process(connection, now: now)
                    } else if !peerClosed {
                        // Fewer bytes than the value lacks: the socket is drained for now.
                        return
                    }
                } else {
                    let full = connection.input.writableBytes == 0
                    process(connection, now: now)
                    if !full && !peerClosed { return }
                }
            case .wouldBlock:
                return
            case .endOfStream:
                connection.readClosed = true
                return
            case .failed(let code):
                logger.debug("read failed", metadata: ["connection.fd": "\(connection.fd)", "error.errno": "\(code)"])
                close(connection)
                return
            }
        }
        // Still reading, so the cap ended the loop: there may be more.
        if connection.wantsRead { connection.rearm = true }
    }

    /// Answers the whole frames in the input and tries to send the replies.
    private func process(_ connection: Connection, now: UInt32) {
        guard !connection.isClosed, !connection.closeAfterFlush, !connection.suspended else { return }
        let result = processor.process(
            input: &connection.input,
            output: &connection.output,
            outputLimit: outputLimit,
            now: now,
            directSend: DirectSend(fd: connection.fd)
        )
        switch result {
        case .needMoreBytes(let frameLength):
            connection.pendingFrameLength = frameLength
        case .outputFull:
            connection.outputBlocked = true
        case .closeAfterReply:
            connection.closeAfterFlush = true
        case .suspended(let operation):
            connection.suspended = true
            start(operation, for: connection)
        case .receivingValue(let direct):
            connection.directPut = direct
            connection.pendingFrameLength = 0
        }
        _ = send(connection)
    }

    // MARK: - Disk operations

    /// Hands an operation to the disk queue; its completion hops back to this loop's queue.
    private func start(_ operation: PendingOperation, for connection: Connection) {
        guard let disk = processor.disk else { return }
        switch operation {
        case .get(let key, let id):
            disk.worker.get(key: key, now: CachetClock.now()) { [self] entry in
                execute { [self] in
                    resume(connection) { processor, output, now in
                        processor.completeGet(key: key, id: id, entry: entry, output: &output, now: now)
                    }
                }
            }
        case .put(let key, let value, let expiry, let id):
            disk.worker.notifyWhenWritable { [self] in
                execute { [self] in
                    guard !connection.isClosed else {
                        disk.worker.abandonWrite(key: key)
                        return
                    }
                    switch disk.worker.submitPut(key: key, value: value, expiry: expiry) {
                    case .queued:
                        resume(connection) { processor, output, _ in processor.completePut(id: id, output: &output) }
                    case .full:
                        start(operation, for: connection)
                    case .refused(let error):
                        resume(connection) { processor, output, now in
                            processor.refusePut(key: key, id: id, error: error, output: &output, now: now)
                        }
                    }
                }
            }
        case .clear(let id, let memoryOnlyItems, let memoryOnlyBytes):
            disk.worker.removeAll { [self] removed in
                execute { [self] in
                    resume(connection) { processor, output, _ in
                        processor.completeClear(
                            id: id,
                            memoryOnlyItems: memoryOnlyItems,
                            memoryOnlyBytes: memoryOnlyBytes,
                            disk: removed,
                            output: &output
                        )
                    }
                }
            }
        }
    }

    /// Writes a completed operation's reply, then carries on with the requests behind it.
    private func resume(
        _ connection: Connection,
        reply: (RequestProcessor, inout ByteBuffer, UInt32) -> Void
    ) {
        guard !connection.isClosed else { return }
        let now = CachetClock.now()
        reply(processor, &connection.output, now)
        connection.suspended = false
        process(connection, now: now)
        settle(connection)
    }

    /// Sends pending output; returns false if the connection was closed.
    private func send(_ connection: Connection) -> Bool {
        guard !connection.isClosed else { return false }
        if case .failed(let code) = connection.flush() {
            logger.debug("send failed", metadata: ["connection.fd": "\(connection.fd)", "error.errno": "\(code)"])
            close(connection)
            return false
        }
        return true
    }

    /// Closes the connection if it is finished, otherwise brings its epoll registration up to date. A
    /// registration that changes, or is renewed for `rearm`, makes the kernel check the socket again and
    /// report it if it is ready: that is how bytes left unread while reading was paused or capped get read.
    private func settle(_ connection: Connection) {
        guard !connection.isClosed else { return }
        let idle = connection.output.readableBytes == 0 && !connection.suspended
        if idle && (connection.closeAfterFlush || connection.readClosed) {
            close(connection)
            return
        }
        let desired = connection.desiredInterest
        if desired != connection.interest || connection.rearm {
            connection.interest = desired
            connection.rearm = false
            _ = cachet_epoll_modify(epollFD, connection.fd, desired | cachet_EPOLLET, connection.token)
        }
    }

    private func close(_ connection: Connection) {
        guard !connection.isClosed else { return }
        connection.isClosed = true
        _ = cachet_epoll_remove(epollFD, connection.fd)
        _ = Glibc.close(connection.fd)
        let slot = Int(connection.token & 0xffff_ffff)
        connections[slot] = nil
        freeSlots.append(slot)
        onClose()
    }

    /// Winds the loop down. Connections go on being served; each is closed once it has nothing left to
    /// answer or send and its peer has sent nothing for `quietPeriod` (or has closed), so requests already
    /// on their way are answered. Calls `completion` (on `queue`) once no connection is left. Called on
    /// `queue`.
    func drain(quietPeriod: DispatchTimeInterval = .milliseconds(100), completion: @escaping @Sendable () -> Void) {
        draining = true
        drainedCallback = completion
        let start = DispatchTime.now()
        for case let connection? in connections { connection.lastReceived = start }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now(), repeating: .milliseconds(20))
        timer.setEventHandler { [unowned self] in
            let quietSince = DispatchTime.now() - quietPeriod
            for case let connection? in connections {
                let idle = connection.output.readableBytes == 0 && !connection.suspended
                if idle && connection.lastReceived < quietSince { close(connection) }
            }
            if connectionCount == 0 {
                drainTimer?.cancel()
                drainTimer = nil
                if let callback = drainedCallback {
                    drainedCallback = nil
                    callback()
                }
            }
        }
        drainTimer = timer
        timer.activate()
    }

    /// Closes every connection at once and stops the source. Called on `queue`.
    func stop() {
        drainTimer?.cancel()
        drainTimer = nil
        for case let connection? in connections { close(connection) }
        // Kept (cancelled) so that deinit knows the cancel handler closes the descriptors.
        source?.cancel()
    }
}
