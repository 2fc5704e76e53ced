/// Whether a node is taking requests, and when to probe it again. Does no I/O: the node feeds it
/// outcomes and it says what changed.
///
/// A refused connection marks the node down at once; timeouts do after ``timeoutsBeforeDown`` in a row
/// (any reply resets the count). A down node is probed (a connect and a PING) after a backoff that
/// starts at ``initialBackoff`` and doubles after each failed probe up to ``maximumBackoff``, each wait
/// drawn between half and all of the backoff so that many clients do not probe in step.
struct NodeHealthStateMachine {
    enum State: Equatable {
        case up(consecutiveTimeouts: Int)
        /// Down; probe at `probeAt` (monotonic nanoseconds); `backoff` is the current backoff.
        case down(probeAt: UInt64, backoff: UInt64)
        /// Down, with a probe in flight.
        case probing(backoff: UInt64)
    }

    /// What changed after an event.
    enum Transition: Equatable {
        /// The node was up and is now down: close its connections, schedule a probe at this time.
        case wentDown(probeAt: UInt64)
        /// The node was down and answered: route to it again.
        case cameUp
        /// A probe failed: probe again at this time.
        case probeRescheduled(probeAt: UInt64)
    }

    let timeoutsBeforeDown: Int
    let initialBackoff: UInt64
    let maximumBackoff: UInt64
    private(set) var state: State = .up(consecutiveTimeouts: 0)

    init(timeoutsBeforeDown: Int, initialBackoff: UInt64, maximumBackoff: UInt64) {
        self.timeoutsBeforeDown = timeoutsBeforeDown
        self.initialBackoff = initialBackoff
        self.maximumBackoff = max(initialBackoff, maximumBackoff)
    }

    /// Whether requests may be routed to the node.
    var isUp: Bool {
        if case .up = state { return true }
        return false
    }

    /// A reply arrived (any status: the node is alive).
    mutating func replied() -> Transition? {
        switch state {
        case .up(let timeouts):
            if timeouts != 0 { state = .up(consecutiveTimeouts: 0) }
            return nil
        case .down, .probing:
            state = .up(consecutiveTimeouts: 0)
            return .cameUp
        }
    }

    /// A request timed out.
    mutating func timedOut(now: UInt64, using random: inout some RandomNumberGenerator) -> Transition? {
        guard case .up(let timeouts) = state else { return nil }
        if timeouts + 1 >= timeoutsBeforeDown { return goDown(now: now, using: &random) }
        state = .up(consecutiveTimeouts: timeouts + 1)
        return nil
    }

    /// A connection was refused or could not be opened.
    mutating func connectFailed(now: UInt64, using random: inout some RandomNumberGenerator) -> Transition? {
        guard case .up = state else { return nil }
        return goDown(now: now, using: &random)
    }

    /// Whether a probe is due at `now`; if so the state becomes probing, and the caller must report
    /// its outcome with ``replied()`` or ``probeFailed(now:using:)``.
    mutating func startProbeIfDue(now: UInt64) -> Bool {
        guard case .down(let probeAt, let backoff) = state, probeAt <= now else { return false }
        state = .probing(backoff: backoff)
        return true
    }

    /// The probe failed: wait twice as long (up to the maximum) before the next.
    mutating func probeFailed(now: UInt64, using random: inout some RandomNumberGenerator) -> Transition? {
        guard case .probing(let backoff) = state else { return nil }
        let next = min(maximumBackoff, backoff.multipliedReportingOverflow(by: 2).partialValue)
        let probeAt = now + Self.jittered(next, using: &random)
        state = .down(probeAt: probeAt, backoff: next)
        return .probeRescheduled(probeAt: probeAt)
    }

    private mutating func goDown(now: UInt64, using random: inout some RandomNumberGenerator) -> Transition {
        let probeAt = now + Self.jittered(initialBackoff, using: &random)
        state = .down(probeAt: probeAt, backoff: initialBackoff)
        return .wentDown(probeAt: probeAt)
    }

    /// A wait between half and all of `backoff`.
    static func jittered(_ backoff: UInt64, using random: inout some RandomNumberGenerator) -> UInt64 {
        let half = backoff / 2
        return half + UInt64.random(in: 0...(backoff - half), using: &random)
    }
}
