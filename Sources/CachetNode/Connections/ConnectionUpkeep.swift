import CachetIO
import CachetStore
import Dispatch

/// The upkeep of a loop's connections: a timer that retries connections waiting for memory, closes the
/// ones that stall while others wait, ends graceful closes at their deadline and drives a drain; winding
/// down; stopping.
///
/// One per loop, a collaborator of its ``NodeIOQueue``; used only on the loop's queue (`@unchecked
/// Sendable` for the timer's work).
final class ConnectionUpkeep: @unchecked Sendable {
    /// The loop whose connections are kept.
    unowned let host: NodeIOQueue
    /// The budget shared by every loop's connections.
    let memory: ConnectionMemory
    /// `memory.releases` when waiting connections were last retried.
    private var seenReleases = 0
    /// Connections in the `closing` phase.
    private(set) var closingCount = 0
    /// Connections counted as waiting for memory (see ``NodeIOQueue/settle(_:now:)``).
    private(set) var waitingForMemory = 0
    /// When a connection holding budget without progress is closed while others wait for memory
    /// (`--client-stall-timeout`).
    private var stalls: StallWatch
    /// Called once no connection is left, during a drain.
    private var drainedCallback: (@Sendable () -> Void)?
    /// When the drain closes each connection; set when it starts.
    private(set) var drainSchedule: DrainSchedule?
    /// The housekeeping timer, while it runs (see ``scheduleHousekeeping()``).
    private var housekeepingTimer: CachetTimerID?
    static let housekeepingInterval = Duration.milliseconds(10)

    init(host: NodeIOQueue, memory: ConnectionMemory, stallTimeout: Double) {
        self.host = host
        self.memory = memory
        stalls = StallWatch(timeout: UInt64(max(0, stallTimeout) * 1e9))
    }

    /// Whether stalled connections are watched for at all (`--client-stall-timeout` above 0).
    var watchesStalls: Bool { stalls.timeout > 0 }

    /// Starts the housekeeping timer unless it runs. It runs only while some connection waits for memory or
    /// closes, or the loop drains, so an idle node is not woken for nothing.
    func scheduleHousekeeping() {
        guard housekeepingTimer == nil else { return }
        housekeepingTimer = host.loop.schedule(after: Self.housekeepingInterval) { [unowned self] in
            housekeepingTimer = nil
            housekeep()
        }
    }

    /// A connection began a graceful close.
    func closingStarted() {
        closingCount += 1
        scheduleHousekeeping()
    }

    /// A connection in a graceful close has closed.
    func closingEnded() {
        closingCount -= 1
    }

    /// A connection started (`true`) or stopped waiting for memory.
    func waitingChanged(_ waiting: Bool) {
        memory.countPaused(waiting ? 1 : -1)
        waitingForMemory += waiting ? 1 : -1
        if waiting { scheduleHousekeeping() }
    }

    /// Runs every `housekeepingInterval` on `queue`: retries connections waiting for memory once some has
    /// been returned, closes graceful closes that reached their deadline, and drives a drain.
    func housekeep() {
        let watchStalls = stalls.isWatching(connectionsWaiting: memory.paused > 0)
        guard waitingForMemory > 0 || closingCount > 0 || host.draining || watchStalls else { return }
        // Runs again after the interval while there is upkeep to do.
        defer { scheduleHousekeeping() }
        if watchStalls { evictStalledConnections() }
        // Idle connections give back the buffers they keep for their next requests, so that what one kept
        // does not hold back one that waits.
        if waitingForMemory > 0 {
            host.forEachConnection { connection in
                if connection.isIdle { connection.trimBuffers(tight: true) }
            }
        }
        let releases = memory.releases
        let retry = waitingForMemory > 0 && releases != seenReleases && memory.allowsRequest(1)
        if retry { seenReleases = releases }
        let now = CachetClock.now()
        if retry { retryWaitingForMemory(now: now) }
        if closingCount > 0 {
            let clock = DispatchTime.now().uptimeNanoseconds
            host.forEachConnection { connection in
                if case .closing(let closing) = connection.phase, clock >= closing.deadline { host.close(connection) }
            }
        }
        if host.draining { drainStep(now: now) }
    }

    /// Closes the connections that hold part of the budget and have not moved for `stallTimeout` while
    /// connections wait for memory: a client that does not read its replies, or does not finish the
    /// request it has started, while its memory is what others wait for (Redis closes such clients by its
    /// client output buffer limits). Looks every `stallScanInterval`. A client with replies pending moves
    /// when the kernel takes some of them (answering more of its pipelined requests is not its doing); a
    /// client with part of a frame in moves when it reads replies or finishes its requests (bytes dripped
    /// in are not enough). A connection waiting for memory with nothing of its own pending is one of those waiting
    /// and is kept; so is every connection while nothing waits (a slow reader alone is only held back).
    func evictStalledConnections() {
        let clock = DispatchTime.now().uptimeNanoseconds
        guard stalls.shouldScan(now: clock) else { return }
        var stalled: [(connection: Connection, held: Int)] = []
        host.forEachConnection { connection in
            if connection.sendProgress != connection.repliesSeen || connection.repliesStalledSince == 0 {
                connection.repliesSeen = connection.sendProgress
                connection.repliesStalledSince = clock
            }
            if connection.requestsTaken != connection.requestsSeen || connection.requestsStalledSince == 0 {
                connection.requestsSeen = connection.requestsTaken
                connection.requestsStalledSince = clock
            }
            let held = connection.heldBytes
            guard held > 0 else { return }
            let pending = Self.pending(connection)
            let isStalled = stalls.isStalled(
                pendingReplies: pending.replies,
                pendingRequest: pending.request,
                repliesStalledSince: connection.repliesStalledSince,
                requestsStalledSince: connection.requestsStalledSince,
                now: clock
            )
            if isStalled { stalled.append((connection, held)) }
        }
        guard !stalled.isEmpty else { return }
        stalled.sort { $0.held > $1.held }
        let seconds = Double(stalls.timeout) / 1e9
        for (connection, held) in stalled {
            host.logger.warning(
                "closing a connection that held connection memory without progress while others waited for it",
                metadata: [
                    "connection.fd": "\(connection.fd)", "connection.held_bytes": "\(held)",
                    "connection.stall_seconds": "\(seconds)",
                ]
            )
            memory.countEvicted()
            host.close(connection)
        }
    }

    /// What a connection holds that only its client can move: replies it has not read, a request it has
    /// not finished sending. Neither while it waits for memory to grow its input, for the disk, or closes.
    static func pending(_ connection: Connection) -> (replies: Bool, request: Bool) {
        let replies = connection.output.readableBytes > 0
        switch connection.phase {
        case .reading(let frameLength): return (replies, frameLength > 0)
        case .receivingValue: return (replies, true)
        case .waitingForOutput, .waitingForMemory(.reply), .waitingForForwards: return (replies, false)
        case .waitingForMemory(.input), .waitingForCompletion, .finishing, .closing, .closed: return (false, false)
        }
    }

    /// Resumes connections waiting for memory, those holding the least first, until the budget is out again:
    /// a connection that holds much (a client that does not read its replies) is served only once the
    /// others' needs are met, so it cannot take back all that the others return.
    private func retryWaitingForMemory(now: UInt32) {
        var waiting: [Connection] = []
        host.forEachConnection { connection in
            if connection.phase.isWaitingForMemory { waiting.append(connection) }
        }
        waiting.sort { $0.footprint < $1.footprint }
        for connection in waiting {
            guard memory.allowsRequest(1) else { return }
            guard case .waitingForMemory(let wait) = connection.phase else { continue }
            switch wait {
            case .input(let frameLength):
                // Reads again once its settle has renewed the registration: the kernel reports what the
                // socket holds.
                connection.phase = .reading(frameLength: frameLength)
                connection.unreadBytesPossible = true
            case .reply:
                connection.phase = .reading(frameLength: 0)
                host.process(connection, now: now)
            }
            host.settle(connection, now: now)
        }
    }

    /// A cluster member that is leaving answers nothing more from now on, while its connections stay open
    /// until the drain (``drain(timeout:leaving:completion:)``) closes them: its peers are told meanwhile, so that a
    /// forward they sent and find unanswered when the connection closes goes to a stand-in rather than to
    /// this member again. Called on `queue`.
    func stopAnswering() {
        host.leaving = true
    }

    /// Winds the loop down within `timeout` (SIGTERM or SIGINT): nothing more is read from the moment the
    /// drain starts. A node on its own answers the requests it had read, then closes the connection
    /// gracefully (FIN after the last reply); one still answering a second later is closed (a client that
    /// does not read its replies cannot keep the node up). A cluster member that is `leaving` answers
    /// nothing more at all (``stopAnswering()``, before its peers were told), and closes every connection
    /// at once. Either way a connection waiting for the disk or for forwards is closed once they have
    /// answered, or at three quarters of `timeout` (it then loses that request's reply), and graceful
    /// closes end by 90% of `timeout`. What a client sent and was not answered was not applied. So a stop
    /// takes what the disk takes, not the time a busy client needs to fall idle, and a member that is
    /// stopping never takes a write on a connection opened before, while its peers, which can no longer
    /// connect to it, take writes of its keys on its behalf. Calls `completion` (on `queue`) once no
    /// connection is left. Called on `queue`.
    func drain(timeout: Double, leaving: Bool, completion: @escaping @Sendable () -> Void) {
        host.draining = true
        host.leaving = leaving
        // The queue is wanted for the drain's work now, not for waiting on more requests.
        host.loop.lingerMilliseconds = 0
        drainedCallback = completion
        drainSchedule = DrainSchedule(start: DispatchTime.now(), timeout: timeout, leaving: leaving)
        scheduleHousekeeping()
        let now = CachetClock.now()
        if !leaving {
            // Each connection answers what it had read, and is closed once that is done.
            host.forEachConnection { connection in
                guard case .reading(frameLength: _) = connection.phase, !connection.turnQueued else { return }
                host.process(connection, now: now)
                host.settle(connection, now: now)
            }
        }
        drainStep(now: now)
    }

    private func drainStep(now: UInt32) {
        guard let schedule = drainSchedule else { return }
        let clock = DispatchTime.now()
        host.forEachConnection { connection in
            let activity: DrainSchedule.Activity
            switch connection.phase {
            case .closing, .closed:
                activity = .gone
            case .waitingForCompletion, .waitingForForwards:
                // Its request gets no reply (a PUT not yet queued is not acknowledged, and not written),
                // unless its forwards answer before the graceful close ends.
                activity = .waiting
            default:
                activity = .answering
            }
            guard schedule.closes(activity, now: clock) else { return }
            host.beginClosing(connection, deadline: schedule.closesEnd)
            host.settle(connection, now: now)
        }
        if host.connectionCount == 0, let callback = drainedCallback {
            drainedCallback = nil
            callback()
        }
    }

    /// Closes every connection at once, then stops the transport loop (which closes the peer channels,
    /// failing their forwards, and drops the timers). Called on `queue`.
    func stop() {
        if let timer = housekeepingTimer {
            host.loop.cancelTimer(timer)
            housekeepingTimer = nil
        }
        host.forEachConnection { host.close($0) }
        host.loop.stop()
    }
}
