import Dispatch

/// When a draining I/O queue closes each of its connections (``NodeIOQueue/drain(timeout:quietPeriod:leaving:completion:)``):
/// the three moments a drain of `timeout` seconds sets when it starts, and the rule that decides, at each
/// step, whether a connection is closed now. Pure: the caller passes the time and what it knows of the
/// connection.
struct DrainSchedule {
    /// Graceful closes end by then: a little before the server's own deadline (90% of the timeout), so that
    /// they end the drain rather than being cut short by it.
    let closesEnd: DispatchTime
    /// Connections waiting for the disk or for forwards are closed from then on, answered or not (75% of
    /// the timeout: a thousand queued writes take a second or two on a busy machine).
    let waitingEnds: DispatchTime
    /// Connections that still send requests are closed from then on: the start for a cluster member that
    /// is leaving (it answers nothing more), else with the waiting ones.
    let servingEnds: DispatchTime
    /// A connection that received nothing for this long, with nothing to send and no forward in flight,
    /// is idle and closed at once.
    let quietPeriod: DispatchTimeInterval

    /// - Parameters:
    ///   - start: when the drain starts.
    ///   - timeout: the drain's whole budget, in seconds (`--shutdown-timeout`).
    ///   - quietPeriod: how long without a request makes a connection idle.
    ///   - leaving: a cluster member that is stopping: nothing more is answered from the start.
    init(start: DispatchTime, timeout: Double, quietPeriod: DispatchTimeInterval, leaving: Bool) {
        closesEnd = start + max(0.05, timeout * 0.9 - 0.05)
        waitingEnds = start + timeout * 0.75
        servingEnds = leaving ? start : waitingEnds
        self.quietPeriod = quietPeriod
    }

    /// What a connection is doing, as far as the drain cares.
    enum Activity {
        /// Closing or closed already.
        case gone
        /// Waiting for the disk or for forwards to answer its request.
        case waiting
        /// Anything else: `idle` when it has nothing to send, no forward in flight, and has received
        /// nothing since `lastReceived`.
        case serving(idle: Bool)
    }

    /// Whether a connection doing `activity` is closed (gracefully) at `now`.
    func closes(_ activity: Activity, now: DispatchTime) -> Bool {
        switch activity {
        case .gone: false
        case .waiting: now >= waitingEnds
        case .serving(let idle): idle || now >= servingEnds
        }
    }

    /// Whether a connection that last received at `lastReceived` counts as quiet at `now`.
    func isQuiet(since lastReceived: DispatchTime, now: DispatchTime) -> Bool {
        lastReceived < now - quietPeriod
    }
}
