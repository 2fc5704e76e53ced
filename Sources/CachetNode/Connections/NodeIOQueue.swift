import CachetIO
import CachetStore
import CachetWire
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// One I/O queue of the node, the host of its connections: a ``CachetEventLoop`` (a serial `DispatchQueue`
/// with one `DispatchSourceRead` over an epoll set of its own; how it batches, lingers and registers
/// channels edge-triggered, and why: `docs/transport.md`) hosting the node's inbound ``Connection``s and, on
/// a node that forwards, its outbound peer channels (``PeerForwarder``).
///
/// A connection's events come here through the hooks `Connection` overrides for the loop's one serving
/// loop (``readRoom(_:)``, ``received(_:on:)``, ``inputEnded(_:)``, ``peerClosed(_:hangup:)``,
/// ``settle(_:now:)``). Edge-triggered, a connection is reported again only when new bytes arrive: one whose
/// last read filled its room may have bytes left that no edge will report (`unreadBytesPossible`), so while
/// it is in a reading phase every settle renews its registration, which makes the kernel check it at once.
/// Which events a connection is registered for is decided in one place,
/// `Connection.interest(for:outputPending:)`, from its phase (`Connection.Phase`), and `settle` applies it
/// after every event, completion and wake-up.
///
/// The host adopts and closes connections and serves their requests (``RequestProcessor``), and calls its
/// collaborators for what waits on something else: ``DiskDispatch`` (the disk tier), ``ConnectionForwarding``
/// (other members), ``ConnectionWatching`` (WATCH) and ``ConnectionUpkeep`` (memory waits, graceful closes,
/// the drain).
///
/// `@unchecked Sendable`: every mutable property is touched only on `queue`; other threads reach the loop
/// only through ``execute(_:)`` and ``executeAndWait(_:)``.
final class NodeIOQueue: @unchecked Sendable {
    let index: Int
    /// The transport loop: the queue, the epoll set, the channels, the timers.
    let loop: CachetEventLoop
    /// The loop's serial queue.
    let queue: DispatchQueue
    /// Requests of one connection answered from its input at a time before the others get a turn (as
    /// memcached's `-R`, requests per event): a client that pipelines thousands of requests does not hold
    /// up the others while it is answered.
    static let requestsPerTurn = 32
    /// Connections hosted now (counted or not), read on `queue`.
    @exclusivity(unchecked) var connectionCount = 0
    let processor: RequestProcessor
    /// What memcached connections answer themselves, without native requests (``MemcacheInPlace``); nil on a
    /// node with users or peers, where every request goes through the processor.
    let memcacheInPlace: MemcacheInPlace?
    /// The processor's router, for the cluster-wide fan-out.
    let router: ForwardRouter?
    /// What this loop does with requests other members answer (its peer connections included); nil on a
    /// node that never forwards.
    let forwardCoordinator: ForwardCoordinator?
    /// Seconds between probes of the peers, on the loop that probes for the node (nil on the others).
    private let probeInterval: Duration?
    private let outputLimit: Int
    let logger: Logger
    let onClose: @Sendable () -> Void
    /// Stopping: nothing more is read (``ConnectionUpkeep/drain(timeout:leaving:completion:)``).
    @exclusivity(unchecked) var draining = false
    /// Nothing more is answered (a cluster member leaving: see ``ConnectionUpkeep/stopAnswering()``).
    @exclusivity(unchecked) var leaving = false
    /// The budget shared by every loop's connections.
    let memory: ConnectionMemory
    /// How long a graceful close may wait for the peer to close after the last reply.
    let closeLinger: Double
    /// Input bytes a graceful close throws away before it gives up waiting for the peer.
    static let discardLimit = 64 << 20
    /// `--client-stall-timeout`, for ``upkeep``.
    private let stallTimeout: Double

    /// Timers, memory waits, graceful closes, the drain.
    private(set) lazy var upkeep = ConnectionUpkeep(host: self, memory: memory, stallTimeout: stallTimeout)
    /// Requests that went to the disk tier; nil on a node without one.
    private(set) lazy var diskDispatch: DiskDispatch? = processor.commands.disk.map {
        DiskDispatch(host: self, disk: $0, memory: memory)
    }
    /// Requests for other members' keys, and the replies held behind them.
    private(set) lazy var forwarding = ConnectionForwarding(
        host: self,
        coordinator: forwardCoordinator,
        processor: processor,
        memory: memory
    )
    /// Connections that sent WATCH.
    private(set) lazy var watching = ConnectionWatching(
        host: self,
        hub: processor.commands.watches,
        maximumPayloadLength: processor.maximumPayloadLength
    )

    init(
        index: Int,
        processor: RequestProcessor,
        router: ForwardRouter? = nil,
        outputLimit: Int,
        memory: ConnectionMemory,
        closeLinger: Double = 2,
        stallTimeout: Double = 0,
        forwardTimeout: Double? = nil,
        peerCredentials: PeerCredentials? = nil,
        health: NodeHealth? = nil,
        probeInterval: Double? = nil,
        lingerMilliseconds: Int,
        logger: Logger,
        onClose: @escaping @Sendable () -> Void
    ) throws(CachetNodeError) {
        let loop: CachetEventLoop
        do throws(CachetIOError) {
            loop = try CachetEventLoop(
                label: "cachet.io.\(index)",
                lingerMilliseconds: lingerMilliseconds,
                qos: .userInitiated
            )
        } catch {
            throw CachetNodeError(code: .resourceExhausted, message: "I/O loop \(index): \(error.message)")
        }
        self.loop = loop
        forwardCoordinator = forwardTimeout.map { forwardTimeout in
            ForwardCoordinator(
                forwarder: PeerForwarder(
                    loop: loop,
                    timeout: .nanoseconds(Int64(forwardTimeout * 1e9)),
                    maximumReplyLength: processor.maximumPayloadLength,
                    health: health,
                    credentials: peerCredentials,
                    logger: logger
                ),
                router: router,
                processor: processor,
                logger: logger
            )
        }
        self.index = index
        self.queue = loop.queue
        self.processor = processor
        memcacheInPlace =
            processor.authorizer == nil && !processor.forwards ? MemcacheInPlace(commands: processor.commands) : nil
        self.probeInterval = probeInterval.map { .nanoseconds(Int64($0 * 1e9)) }
        self.router = router
        self.outputLimit = outputLimit
        self.memory = memory
        self.closeLinger = closeLinger
        self.stallTimeout = stallTimeout
        var logger = logger
        logger[metadataKey: "io.loop"] = "\(index)"
        self.logger = logger
        self.onClose = onClose
    }

    /// Runs `work` on the loop's queue, waking the handler if it is lingering in `epoll_wait`.
    /// - Parameter work: what to run; it may touch the loop's state.
    func execute(_ work: @escaping @Sendable () -> Void) {
        loop.execute(work)
    }

    /// Runs `work` on the loop's queue and waits for it (directly when called on the queue).
    /// - Parameter work: what to run; it may touch the loop's state.
    func executeAndWait(_ work: () -> Void) {
        loop.executeAndWait(work)
    }

    /// Starts watching the epoll set, and the forwarder's probes.
    func start() {
        loop.start()
        if let forwarder = forwardCoordinator?.forwarder {
            let processor = processor
            forwarder.dropLocalCopies = { keys in processor.commands.dropCopies(keys) }
            forwarder.readLocalValue = { [weak self] key, completion in
                if let local = processor.commands.memoryValue(key) { return completion(local) }
                guard let self, let disk = processor.commands.disk else { return completion(nil) }
                // Evicted from memory to the disk tier: read there, and back on this loop with the answer.
                let completion = LoopConfined(completion)
                // A value longer than a frame is not read (nor handed on whole): taken as absent.
                let longest = processor.maximumPayloadLength - CachetProtocol.headerSize
                disk.worker.get(key: key, now: CachetClock.now(), maximumValueLength: longest) { [weak self] entry in
                    self?.execute {
                        let now = CachetClock.now()
                        guard let entry, entry.oversizedLength == 0, entry.expiry == 0 || entry.expiry > now else {
                            return completion.value(nil)
                        }
                        completion.value((entry.value, entry.expiry == 0 ? 0 : entry.expiry - now))
                    }
                }
            }
            forwarder.start(probeInterval: probeInterval)
        }
        if upkeep.watchesStalls {
            // A connection that starts waiting on another loop may be waiting for this loop's connections.
            memory.onWaitingStarted { [weak self] in
                self?.execute { [weak self] in self?.upkeep.scheduleHousekeeping() }
            }
        }
    }

    /// Calls `body` with every connection the loop hosts (not its peer channels); `body` may close them.
    func forEachConnection(_ body: (Connection) -> Void) {
        loop.forEachChannel { channel in
            if let connection = channel as? Connection { body(connection) }
        }
    }

    // MARK: - Serving: the loop's hooks (``CachetEventLoop``'s serving loop calls them through `Connection`)

    /// Where the loop reads next for `connection`, by its phase: the input's free room while it reads
    /// requests (nil, and the connection waits for memory, when the budget cannot grow the input for the
    /// frame it is receiving), a large PUT's entry while its value arrives (at most the bytes it still
    /// lacks, so that the frames after it stay in the socket), the input again to throw bytes away while it
    /// closes; nil in every other phase, and while its next turn is queued (whole frames wait for it:
    /// reading more now would only grow the input) or the loop drains (what was read is answered, then
    /// the connection closes).
    @inline(__always)
    func readRoom(_ connection: Connection) -> UnsafeMutableRawBufferPointer? {
        switch connection.phase {
        case .reading(let frameLength):
            guard !connection.turnQueued else {
                // The turn processes them, and a settle in a reading phase renews the registration.
                connection.unreadBytesPossible = true
                return nil
            }
            if draining {
                process(connection, now: loop.batchSeconds)
                return nil
            }
            guard connection.prepareInput(frameLength: frameLength) else {
                connection.phase = .waitingForMemory(.input(frameLength: frameLength))
                return nil
            }
            return UnsafeMutableRawBufferPointer(
                start: connection.input.writePointer,
                count: connection.input.writableBytes
            )
        case .receivingValue(let direct):
            return direct.remaining
        case .closing:
            connection.input.moveReadIndex(to: connection.input.writeIndex)
            return UnsafeMutableRawBufferPointer(
                start: connection.input.writePointer,
                count: connection.input.writableBytes
            )
        default:
            return nil
        }
    }

    /// `count` bytes were read into the room ``readRoom(_:)`` gave: whole frames are answered, a large PUT
    /// whose value is complete is stored and answered, bytes a closing connection reads are thrown away
    /// (past `discardLimit` of them it closes without waiting for its peer).
    @inline(__always)
    func received(_ count: Int, on connection: Connection) {
        let now = loop.batchSeconds
        switch connection.phase {
        case .reading:
            connection.input.moveWriteIndex(forwardBy: count)
            process(connection, now: now)
        case .receivingValue(let direct):
            direct.received += count
            guard direct.isComplete else { return }
            connection.phase = .reading(frameLength: 0)
            if let forwards = connection.forwards {
                processor.completeDirectPut(direct, output: &forwards.pending, now: now)
            } else {
                processor.completeDirectPut(direct, output: &connection.output, now: now)
            }
            connection.requestsTaken &+= 1
            process(connection, now: now)
        case .closing(var closing):
            closing.discarded += count
            connection.phase = .closing(closing)
            if closing.discarded > Self.discardLimit { close(connection) }
        default:
            break
        }
    }

    /// The peer ended its stream: a closing connection notes it (and closes once its replies are sent);
    /// any other finishes (its replies are sent, then it closes). A partial frame, or a large value still
    /// arriving, is dropped without a reply, and the older value, if any, stays.
    func inputEnded(_ connection: Connection) {
        if case .closing(var closing) = connection.phase {
            closing.peerEnded = true
            connection.phase = .closing(closing)
        } else {
            connection.phase = .finishing
        }
    }

    /// The peer closed its side (after this event's reads, if any). A connection that waits for memory to
    /// grow its input for a frame whose missing bytes are no longer all in the socket can never complete
    /// it: it finishes now (as at any end of stream inside a frame), so that a peer that leaves half a frame
    /// behind does not hold its memory. When both directions are gone (`hangup`) and nothing is left to
    /// send, it closes. Every other case goes on: the peer may still read its replies.
    func peerClosed(_ connection: Connection, hangup: Bool) {
        if case .waitingForMemory(.input(let frameLength)) = connection.phase {
            let missing = frameLength - connection.input.readableBytes
            if frameLength == 0 || connection.unreadBytes < missing {
                connection.phase = .finishing
            }
        }
        if hangup && !connection.isClosed && connection.output.readableBytes == 0 {
            close(connection)
        }
    }

    /// A connection's socket failed (a read, a send, or an error epoll reported): it is closed. A TLS
    /// failure (a bad certificate, plain text on the TLS port...) is the operator's to see.
    func connectionFailed(_ connection: Connection, _ error: CachetIOError) {
        if let tls = connection.tls, let failure = tls.lastFailure {
            let what = tls.isEstablished ? "TLS connection failed" : "TLS handshake failed"
            logger.info(
                "\(what): connection closed",
                metadata: ["connection.fd": "\(connection.fd)", "tls.error": "\(failure)"]
            )
        } else {
            logger.debug(
                "connection failed",
                metadata: ["connection.fd": "\(connection.fd)", "error.message": "\(error.message)"]
            )
        }
    }

    /// The pending output above which a connection's requests wait for its peer to read: the output limit
    /// (4 MiB), or, when the memory budget's share for replies is short, what the output buffer holds
    /// without growing beyond that share, less 2 KiB for one more small reply (GET replies of 1 KiB and
    /// more are checked against the budget one by one). So a client that pipelines
    /// small requests and never reads is held to its buffer as it is, not to the output limit.
    @inline(__always)
    func pendingOutputLimit(_ connection: Connection, room: Int) -> Int {
        min(outputLimit, connection.output.capacity + room) - 2048
    }

    /// Answers the whole frames in the input and tries to send the replies. Called with the connection
    /// in a reading phase; leaves it in the phase the input calls for. A request forwarded to another
    /// member does not stop it: the replies behind it are held in order (``ConnectionForwarding/processHeld(_:now:tally:)``).
    func process(_ connection: Connection, now: UInt32) {
        if leaving {
            // Leaving the cluster: what is left in the input is not answered. Connections are closed once
            // the drain starts (after the peers were told; until then they are kept open, unanswered).
            if draining { beginClosing(connection) }
            return
        }
        if connection.watch != nil {
            watching.process(connection, now: now)
            return
        }
        // Requests answered in this turn are timed together, once their replies are handed to the socket.
        let started = CachetDeadline.now()
        connection.turnStarted = started
        var tally = RequestTally()
        defer {
            if !tally.isEmpty {
                processor.commands.counters.latencies.observe(tally, nanoseconds: CachetDeadline.now() &- started)
            }
        }
        if connection.forwards != nil && !forwarding.processHeld(connection, now: now, tally: &tally) {
            _ = send(connection)
            return
        }
        while true {
            let replyRoom = memory.replyRoom
            let outputLimit = pendingOutputLimit(connection, room: replyRoom)
            // A connection whose replies have all been sent may queue one of ordinary size whatever the
            // budget says (see `ConnectionMemory`).
            let outputCapacityLimit = max(
                connection.output.capacity + replyRoom,
                connection.output.readableBytes == 0 ? ConnectionMemory.fairAllowance : 0
            )
            // Another protocol's requests are turned into native ones, served as a binary client's are.
            // (One test of unchecked storage for a native connection.)
            let translated = connection.transformsOutput
            if translated {
                // What a session answers itself stays within what the processor may queue, and what any
                // connection may queue whatever the budget.
                let sessionLimit = min(outputLimit, outputCapacityLimit, ConnectionMemory.fairAllowance)
                enterSessionTurn(connection, outputLimit: sessionLimit, now: now, tally: &tally)
            }
            let result = processor.process(
                input: &connection.input,
                output: &connection.output,
                outputLimit: outputLimit,
                outputCapacityLimit: outputCapacityLimit,
                now: now,
                access: &connection.access,
                tally: &tally,
                // (A memcached connection's too: its native requests are all item requests, whose large
                // hits go out as VALUE lines.)
                directSend: translated && connection.memcache == nil ? nil : DirectSend(channel: connection),
                requestLimit: Self.requestsPerTurn
            )
            if translated {
                let end = leaveSessionTurn(connection, result)
                if end == .moreCommands { continue }
                if end == .closing { break }
            }
            switch result {
            case .needMoreBytes(var frameLength):
                // A memcached storage command whose data block is still arriving: the input grows towards its
                // length, as towards a native frame's.
                if translated && frameLength == 0 { frameLength = connection.memcache?.partialCommandLength ?? 0 }
                // Every request it had sent is answered (none is left half-sent): progress, for
                // `evictStalledConnections`.
                if frameLength == 0 { connection.requestsTaken &+= 1 }
                connection.phase = .reading(frameLength: frameLength)
                // Stopping: every whole request it had read is answered (part of one is not, nor applied).
                if draining { beginClosing(connection, deadline: upkeep.drainSchedule?.closesEnd) }
            case .outputFull:
                connection.phase = .waitingForOutput
            case .memoryFull:
                connection.phase = .waitingForMemory(.reply)
            case .closeAfterReply:
                beginClosing(connection)
            case .suspended(.forward(let request)):
                tally.uncount(LatencyCommand(request.opcode))
                forwarding.start(request, for: connection)
                // Answered already (its owner marked down), it leaves no forward in flight: carry on here
                // (a loop, not a call, so that a long run of such forwards cannot deepen the stack).
                if forwarding.processHeld(connection, now: now, tally: &tally) { continue }
            case .suspended(let operation):
                tally.uncount(operation.latencyCommand)
                wait(for: operation, connection)
            case .receivingValue(let direct):
                connection.phase = .receivingValue(direct)
            case .yielded:
                connection.phase = .reading(frameLength: 0)
                yieldTurn(connection)
            }
            break
        }
        _ = send(connection)
    }

    /// Starts a turn of a connection on the memcached or HTTP port: the whole requests of its input become
    /// native requests (``TranslatingSession``), and the connection's input holds those for the processor
    /// until ``leaveSessionTurn(_:_:)`` (the two buffers change places, so that the processor is called
    /// from one place for every connection).
    func enterSessionTurn(_ connection: Connection, outputLimit: Int, now: UInt32, tally: inout RequestTally) {
        if let memcache = connection.memcache {
            enterSessionTurn(memcache, connection, outputLimit: outputLimit, now: now, tally: &tally)
        } else if let http = connection.http {
            enterSessionTurn(http, connection, outputLimit: outputLimit, now: now, tally: &tally)
        }
    }

    private func enterSessionTurn(
        _ session: some TranslatingSession,
        _ connection: Connection,
        outputLimit: Int,
        now: UInt32,
        tally: inout RequestTally
    ) {
        session.beginTurn(
            input: &connection.input,
            output: &connection.output,
            outputLimit: outputLimit,
            now: now,
            host: self,
            tally: &tally
        )
        session.exchangeNative(with: &connection.input)
    }

    /// What a connection on the memcached or HTTP port does after its turn.
    enum SessionTurnEnd {
        /// As a binary connection with that result.
        case carryOn
        /// Its native requests are served and whole requests wait in its input: another turn.
        case moreCommands
        /// `quit`, a line too long, an HTTP request that closes: closing, once what came before is answered.
        case closing
    }

    /// Ends a turn begun by ``enterSessionTurn(_:outputLimit:now:tally:)``: the buffers change back.
    func leaveSessionTurn(_ connection: Connection, _ result: ProcessingResult) -> SessionTurnEnd {
        if let memcache = connection.memcache { return leaveSessionTurn(memcache, connection, result) }
        if let http = connection.http { return leaveSessionTurn(http, connection, result) }
        return .carryOn
    }

    private func leaveSessionTurn(
        _ session: some TranslatingSession,
        _ connection: Connection,
        _ result: ProcessingResult
    )
        -> SessionTurnEnd
    {
        session.exchangeNative(with: &connection.input)
        guard case .needMoreBytes = result else { return .carryOn }
        if session.wantsTurn(input: connection.input, outputBytes: connection.output.readableBytes) {
            return .moreCommands
        }
        guard session.quitting else { return .carryOn }
        beginClosing(connection)
        return .closing
    }

    /// What a memcached connection asked of the node itself: `flush_all` with a delay, `cache_memlimit`.
    func applyNodeRequests(of session: MemcacheSession) {
        if !session.flushDelays.isEmpty { scheduleFlushes(session) }
        if let bytes = session.memoryLimits.last {
            // memcached's `cache_memlimit`: the memory tier's limit, on this node.
            processor.commands.store.setMemoryLimit(bytes)
            session.memoryLimits = []
        }
    }

    /// Schedules the delayed `flush_all`s a memcached connection asked for: each empties this node (memory,
    /// and the disk tier behind its queue) once its delay has passed, as memcached's does.
    private func scheduleFlushes(_ session: MemcacheSession) {
        for delay in session.flushDelays {
            _ = loop.schedule(after: .seconds(Int(clamping: delay))) { [weak self] in
                guard let self else { return }
                if case .waitingForDisk = processor.commands.clear(prefixes: []) {
                    diskDispatch?.disk.worker.removeAll { _ in }
                }
            }
        }
        session.flushDelays = []
    }

    /// Lets the loop serve the others before it answers the rest of a connection's input: the connection
    /// is processed again from a block queued behind them (once, however often it yields meanwhile; an
    /// event of its own may process it first, which leaves the block nothing to do).
    func yieldTurn(_ connection: Connection) {
        guard !connection.turnQueued else { return }
        connection.turnQueued = true
        execute { [self] in
            connection.turnQueued = false
            guard case .reading(frameLength: 0) = connection.phase else { return }
            let now = CachetClock.now()
            process(connection, now: now)
            settle(connection, now: now)
        }
    }

    /// Sends pending output; returns false if the connection was closed.
    func send(_ connection: Connection) -> Bool {
        guard !connection.isClosed else { return false }
        switch connection.sendOutput() {
        case .drained, .partial:
            return true
        case .failed(let code):
            logger.debug("send failed", metadata: ["connection.fd": "\(connection.fd)", "error.errno": "\(code)"])
            close(connection)
            return false
        }
    }

    /// Brings a connection to a phase that waits for something, then its epoll registration and memory
    /// charge up to date. The one place after every event, completion and wake-up that decides what the
    /// connection waits for:
    /// - a connection waiting for its output to drain whose output has drained answers the requests it
    ///   holds (and so reads again, or waits for something else), once per settle: a second time, it
    ///   yields its turn (``yieldTurn(_:)``);
    /// - a finishing connection whose replies are all sent (none held behind forwards in flight) closes;
    /// - a closing connection whose replies are all sent (likewise) shuts down its write side, and closes once the
    ///   peer has ended its stream too.
    /// Then the interest is derived from the phase (``Connection/interest(for:outputPending:)``). A
    /// registration that changes, or is renewed while `unreadBytesPossible` is set, makes the kernel check the
    /// socket again and report it if it is ready: that is how bytes left unread while reading was paused or
    /// capped get read.
    func settle(_ connection: Connection, now: UInt32) {
        var resumed = false
        while true {
            switch connection.phase {
            case .waitingForOutput
            where connection.output.readableBytes <= pendingOutputLimit(connection, room: memory.replyRoom),
                // An HTTP connection with work that no read will start, learnt as its replies were turned:
                // the next piece of a value, the request pipelined behind it, or the close it asked for.
                .reading
            where connection.transformsOutput
                && connection.http.map {
                    $0.quitting || $0.wantsTurn(input: connection.input, outputBytes: connection.output.readableBytes)
                } == true:
                connection.phase = .reading(frameLength: 0)
                // Once per settle: a client whose replies the kernel keeps taking (it has room for
                // megabytes) would otherwise be answered here until that room is gone, while every other
                // connection waits.
                guard !resumed else {
                    yieldTurn(connection)
                    break
                }
                resumed = true
                process(connection, now: now)
                continue
            case .finishing where connection.output.readableBytes == 0 && connection.forwards == nil:
                close(connection)
                return
            case .closing(var closing) where connection.output.readableBytes == 0 && connection.forwards == nil:
                if !closing.writeShut {
                    connection.shutdownOutput()
                    closing.writeShut = true
                    connection.phase = .closing(closing)
                }
                if closing.peerEnded {
                    close(connection)
                    return
                }
            case .closed:
                return
            case .waitingForCompletion where connection.valueFrames?.mayContinue(on: connection) == true:
                // A GET answered in several frames reads its next piece once the client has taken most of
                // the last one.
                connection.valueFrames.unsafelyUnwrapped.awaitingDrain = false
                diskDispatch?.sendNextPiece(on: connection)
            default:
                break
            }
            break
        }
        connection.trimBuffers(tight: memory.replyRoom == 0)
        let waiting = connection.phase.isWaitingForMemory
        if waiting != connection.countedAsWaiting {
            connection.countedAsWaiting = waiting
            upkeep.waitingChanged(waiting)
        }
        // Derived from the phase (what `Connection.activeEvents` says too); applied when it changed, or
        // renewed while the connection reads and its socket may hold bytes no edge will report.
        let desired = Connection.interest(
            for: connection.phase,
            outputPending: connection.output.readableBytes > 0,
            levelTriggered: connection.usesTLS
        )
        if desired != connection.registeredEvents.rawValue || (connection.unreadBytesPossible && connection.wantsRead) {
            loop.updateInterest(of: connection, rearm: true)
        }
    }

    /// Makes a connection wait for a disk operation, a fan-out or a WATCH's start, and starts it.
    func wait(for operation: PendingOperation, _ connection: Connection) {
        connection.phase = .waitingForCompletion
        connection.waitingCommand = operation.latencyCommand
        switch operation {
        case .forward(let request):
            // `process` starts forwards itself and goes on with the requests behind them.
            forwarding.start(request, for: connection)
        case .fanOut(let request):
            forwarding.startFanOut(request, for: connection)
        case .watch(let start):
            watching.start(start.request, id: start.id, for: connection)
        case .get, .rangedGet, .put, .clear, .uploadPart, .itemWrite, .itemPut:
            diskDispatch?.begin(operation, for: connection)
        }
    }

    /// Writes part of a reply of the operation a connection waits for (a frame of a GET answered in several),
    /// held behind the connection's forwards in flight, if any, and sends what it can; the connection goes
    /// on waiting.
    func appendWhileWaiting(_ connection: Connection, _ write: (inout CachetByteBuffer) -> Void) {
        guard case .waitingForCompletion = connection.phase else { return }
        if let forwards = connection.forwards {
            write(&forwards.pending)
        } else {
            write(&connection.output)
        }
        guard send(connection) else { return }
        settle(connection, now: CachetClock.now())
    }

    /// Writes a completed operation's reply (held behind the connection's forwards in flight, if any),
    /// then carries on with the requests behind it.
    func resume(
        _ connection: Connection,
        reply: (RequestProcessor, inout CachetByteBuffer, UInt32) -> Void
    ) {
        guard case .waitingForCompletion = connection.phase else { return }
        processor.commands.counters.latencies.observe(
            connection.waitingCommand,
            nanoseconds: CachetDeadline.now() &- connection.turnStarted
        )
        let now = CachetClock.now()
        if let forwards = connection.forwards {
            reply(processor, &forwards.pending, now)
        } else {
            reply(processor, &connection.output, now)
        }
        connection.phase = .reading(frameLength: 0)
        process(connection, now: now)
        settle(connection, now: now)
    }

    // MARK: - Adopting and ending connections

    /// Adopts an accepted socket, speaking `language` (the listener's). Called on `queue`.
    func register(fd: Int32, speaking language: ConnectionLanguage = .native) {
        guard let connection = adopt(fd: fd, counted: true) else { return }
        speak(language, on: connection)
    }

    private func speak(_ language: ConnectionLanguage, on connection: Connection) {
        switch language {
        case .native:
            break
        case .memcache(let settings):
            connection.memcache = MemcacheSession(
                version: settings.version,
                requiresAuth: settings.requiresAuth,
                flushesCluster: settings.flushesCluster,
                maximumValueLength: settings.maximumValueLength
            )
        case .http(let settings):
            connection.http = HTTPSession(settings: settings, secure: connection.usesTLS)
        }
    }

    /// Adopts a socket accepted on the TLS port: its reads and writes go through a session of `context`,
    /// whose handshake the first read does. One whose handshake has not finished `handshakeDeadline`
    /// seconds later is closed, with a log line. Called on `queue`.
    func register(
        fd: Int32,
        tls context: CachetTLSContext,
        handshakeDeadline: Double,
        speaking language: ConnectionLanguage = .native
    ) {
        guard let connection = adopt(fd: fd, counted: true, tls: context) else { return }
        speak(language, on: connection)
        _ = loop.schedule(after: .milliseconds(Int(handshakeDeadline * 1000))) { [weak self, weak connection] in
            guard let self, let connection, !connection.isClosed, connection.tls?.isEstablished == false else {
                return
            }
            logger.notice(
                "TLS handshake did not finish in time: connection closed",
                metadata: ["connection.fd": "\(connection.fd)", "tls.handshake_timeout": "\(handshakeDeadline)"]
            )
            close(connection)
        }
    }

    /// Answers a connection over `--max-connections` with `reply` and closes it gracefully (a client that
    /// sent requests at once would otherwise get a reset, which may discard the reply). It is not counted
    /// as open. Past 1,000 graceful closes in progress on this loop it is closed at once instead, so that
    /// a flood of connections cannot hold descriptors. Called on `queue`.
    func reject(fd: Int32, reply: [UInt8]) {
        guard upkeep.closingCount < 1_000, let connection = adopt(fd: fd, counted: false) else {
            _ = reply.withUnsafeBytes { CachetSocket.send(fd, $0) }
            CachetSocket.close(fd)
            return
        }
        reply.withUnsafeBytes { connection.output.append($0) }
        beginClosing(connection)
        settle(connection, now: CachetClock.now())
    }

    private func adopt(fd: Int32, counted: Bool, tls: CachetTLSContext? = nil) -> Connection? {
        let connection = Connection(owner: self, memory: memory, counted: counted)
        if let tls { connection.useTLS(tls) }
        if processor.authorizer != nil {
            // A node with users: AUTH first; failures are counted against the client's address.
            let address = CachetSocketAddress.remote(of: fd)?.ipAddress ?? "unknown"
            connection.access = ConnectionAccess(state: .anonymous, address: address)
        }
        connectionCount += 1
        // Registered for the events its first phase needs; a socket epoll refuses is closed at once
        // (`connectionClosed` does the bookkeeping).
        loop.register(connection, fd: fd, isNonBlocking: true)
        guard !connection.isClosed else {
            logger.warning("could not watch a new connection", metadata: ["connection.fd": "\(fd)"])
            return nil
        }
        return connection
    }

    /// Starts the graceful close: nothing more is answered; once what is queued has been sent, the write
    /// side is shut down; input is read and thrown away until the peer closes, `discardLimit` bytes, or
    /// `deadline` (by default `closeLinger` from now).
    func beginClosing(_ connection: Connection, deadline: DispatchTime? = nil) {
        switch connection.phase {
        case .closing, .closed: return
        default: break
        }
        let limit = DispatchTime.now() + closeLinger
        let deadline = deadline.map { min($0, limit) } ?? limit
        connection.input.moveReadIndex(to: connection.input.writeIndex)
        connection.phase = .closing(Connection.Closing(deadline: deadline.uptimeNanoseconds))
        upkeep.closingStarted()
        _ = send(connection)
    }

    /// Closes a connection at once: its socket, its registration (``connectionClosed(_:)`` does the rest).
    func close(_ connection: Connection) {
        guard !connection.isClosed else { return }
        connection.close()
    }

    /// A connection's channel has closed (by ``close(_:)``, a failed registration or the loop stopping): its
    /// budget, its counts. Called once per connection.
    func connectionClosed(_ connection: Connection) {
        if case .closing = connection.phase { upkeep.closingEnded() }
        connection.phase = .closed
        connection.valueFrames = nil
        connectionCount -= 1
        // The buffers go with the connection (the last reference is the loop's, or a disk completion's).
        memory.recharge(from: connection.charged, to: ConnectionMemory.BufferCharge())
        connection.charged = ConnectionMemory.BufferCharge()
        // Forwards still in flight find their pipeline gone and write nothing.
        connection.dropForwards()
        diskDispatch?.forget(connection)
        if connection.sentParts, let disk = diskDispatch?.disk {
            // Its uploads not finished are given up, their staging files freed.
            for upload in disk.uploads.abandon(connection: ObjectIdentifier(connection)) {
                disk.worker.abortUpload(upload)
            }
        }
        if let stream = connection.watch {
            processor.commands.watches.unregister(stream)
            connection.watch = nil
        }
        if connection.countedAsWaiting {
            connection.countedAsWaiting = false
            upkeep.waitingChanged(false)
        }
        if connection.counted { onClose() }
    }
}
