import Dispatch

/// When a draining I/O queue closes each of its connections (``NodeIOQueue/drain(timeout:leaving:completion:)``):
/// the moments a drain of `timeout` seconds sets when it starts, and the rule that decides, at each step,
/// whether a connection is closed now. A stopping node reads nothing more; a cluster member that is leaving
/// answers nothing more either, while a node on its own answers the requests it had read, for a second at
/// most. Pure: the caller passes the time and what it knows of the connection.
struct DrainSchedule {
    /// Graceful closes end by then: a little before the server's own deadline (90% of the timeout), so that
    /// they end the drain rather than being cut short by it.
    let closesEnd: DispatchTime
    /// Connections waiting for the disk or for forwards are closed from then on, answered or not (75% of
    /// the timeout: queued disk writes can take seconds on a busy machine, and the closes need the rest).
    let waitingEnds: DispatchTime
    /// Connections still answering requests they had read are closed from then on: the start for a
    /// cluster member that is leaving (it answers nothing more), else one second after it (or the waiting
    /// ones' end, if sooner): a client that does not read its replies cannot keep the node up longer.
    let answeringEnds: DispatchTime

    /// How long a node on its own goes on answering the requests it had read when it stopped, at most.
    static let answeringPeriod = 1.0

    /// - Parameters:
    ///   - start: when the drain starts.
    ///   - timeout: the drain's whole budget, in seconds (`--shutdown-timeout`).
    ///   - leaving: a cluster member that is stopping: nothing more is answered from the start.
    init(start: DispatchTime, timeout: Double, leaving: Bool) {
        closesEnd = start + max(0.05, timeout * 0.9 - 0.05)
        waitingEnds = start + timeout * 0.75
        answeringEnds = leaving ? start : start + min(timeout * 0.75, Self.answeringPeriod)
    }

    /// What a connection is doing, as far as the drain cares.
    enum Activity {
        /// Closing or closed already.
        case gone
        /// Waiting for the disk or for forwards to answer its request.
        case waiting
        /// Anything else: answering what it had read (a node on its own closes it once that is done).
        case answering
    }

    /// Whether a connection doing `activity` is closed (gracefully) at `now`.
    func closes(_ activity: Activity, now: DispatchTime) -> Bool {
        switch activity {
        case .gone: false
        case .waiting: now >= waitingEnds
        case .answering: now >= answeringEnds
        }
    }
}
