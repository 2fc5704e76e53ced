import CachetStore
import Dispatch

/// The loop's lifecycle and upkeep: a timer that retries connections waiting for memory, ends graceful
/// closes at their deadline and drives a drain; winding down; stopping. Everything here runs on `queue`.
extension EventLoop {
    /// Runs every `housekeepingInterval` on `queue`: retries connections waiting for memory once some has
    /// been returned, closes graceful closes that reached their deadline, and drives a drain.
    func housekeep() {
        guard waitingForMemory > 0 || closingCount > 0 || draining else {
            housekeepingTimer?.cancel()
            housekeepingTimer = nil
            return
        }
        let releases = memory.releases
        let retry = waitingForMemory > 0 && releases != seenReleases && memory.allows(1)
        if retry { seenReleases = releases }
        let now = CachetClock.now()
        if retry { retryWaitingForMemory(now: now) }
        if closingCount > 0 {
            let clock = DispatchTime.now().uptimeNanoseconds
            for case let connection? in connections {
                if case .closing(let closing) = connection.phase, clock >= closing.deadline { close(connection) }
            }
        }
        if draining { drainStep(now: now) }
    }

    /// Resumes connections waiting for memory, those holding the least first, until the budget is out again:
    /// a connection that holds much (a client that does not read its replies) is served only once the
    /// others' needs are met, so it cannot take back all that the others return.
    private func retryWaitingForMemory(now: UInt32) {
        var waiting: [Connection] = []
        for case let connection? in connections where connection.phase.isWaitingForMemory {
            waiting.append(connection)
        }
        waiting.sort { $0.footprint < $1.footprint }
        for connection in waiting {
            guard memory.allows(1) else { return }
            guard case .waitingForMemory(let wait) = connection.phase else { continue }
            switch wait {
            case .input(let frameLength):
                connection.phase = .reading(frameLength: frameLength)
                receive(connection, peerClosed: false, now: now)
            case .reply:
                connection.phase = .reading(frameLength: 0)
                process(connection, now: now)
            }
            settle(connection, now: now)
        }
    }

    /// Winds the loop down within `timeout`. Connections go on being served; each one idle (nothing to
    /// answer or send, nothing received for `quietPeriod`) is closed gracefully at once, and after three
    /// quarters of `timeout` every connection is (one waiting for the disk loses that request's reply);
    /// graceful closes end by 90% of `timeout` at the latest. Calls `completion` (on `queue`) once no connection is left. Called on `queue`.
    func drain(
        timeout: Double,
        quietPeriod: DispatchTimeInterval = .milliseconds(100),
        completion: @escaping @Sendable () -> Void
    ) {
        draining = true
        drainedCallback = completion
        let start = DispatchTime.now()
        // Graceful closes end a little before the server's own deadline, so that they end the drain
        // rather than being cut short by it.
        drainDeadline = start + max(0.05, timeout * 0.9 - 0.05)
        // Requests already sent may need the disk queue (a thousand writes take a second or two on a
        // busy machine): most of the time goes to answering them; closing gracefully takes milliseconds
        // for a client that reads.
        drainServingEnds = start + timeout * 0.75
        drainQuietPeriod = quietPeriod
        for case let connection? in connections { connection.lastReceived = start }
        scheduleHousekeeping()
        drainStep(now: CachetClock.now())
    }

    private func drainStep(now: UInt32) {
        let clock = DispatchTime.now()
        let quietSince = clock - drainQuietPeriod
        let servingOver = clock >= drainServingEnds
        for case let connection? in connections {
            switch connection.phase {
            case .closing, .closed:
                continue
            case .waitingForDisk:
                // Its request gets no reply (a PUT not yet queued is not acknowledged, and not written).
                guard servingOver else { continue }
            default:
                let idle = connection.output.readableBytes == 0 && connection.lastReceived < quietSince
                guard idle || servingOver else { continue }
            }
            beginClosing(connection, deadline: drainDeadline)
            settle(connection, now: now)
        }
        if connectionCount == 0, let callback = drainedCallback {
            drainedCallback = nil
            callback()
        }
    }

    /// Closes every connection at once and stops the source. Called on `queue`.
    func stop() {
        housekeepingTimer?.cancel()
        housekeepingTimer = nil
        for case let connection? in connections { close(connection) }
        // Kept (cancelled) so that deinit knows the cancel handler closes the descriptors.
        source?.cancel()
    }
}
