/// One peer's health as a node sees it: up, suspect or down, and when to probe it again. Pure: it reads
/// no clock (every event carries `now`, in monotonic nanoseconds) and draws jitter from the random source
/// it is given. The rules are `Protocol/CLUSTER.md`, "Health".
///
/// - A reply of any status (a forwarded request's or a probe's) means the peer is alive: up.
/// - A timeout makes an up peer suspect; ``Configuration/timeoutsBeforeDown`` timeouts in a row make it
///   down. A suspect peer is still routed to.
/// - A refused (or failed) connection makes it down at once.
/// - A down peer is probed after a backoff that starts at ``Configuration/initialBackoff`` and doubles
///   after every failed probe up to ``Configuration/maximumBackoff``; each wait is drawn between half and
///   all of the backoff (the rule CachetClient follows), so nodes do not probe in step.
/// - Flapping is damped: a peer that comes back keeps its backoff until it has stayed up for
///   ``Configuration/holdPeriod``; a relapse within that period doubles the backoff instead of restarting
///   it, so a flapping peer is probed, and so trusted again, more and more rarely.
/// - A caller may forbid going down (`mayGoDown: false`), which ``CachetClusterHealth`` does for the last
///   peer not down: the peer is then held suspect instead.
public struct CachetPeerHealth: Sendable, Hashable {
    /// Thresholds and times, in nanoseconds.
    public struct Configuration: Sendable, Hashable {
        /// Timeouts in a row that mark a peer down; at least 1. Default 3.
        public var timeoutsBeforeDown: Int
        /// The first wait before a down peer is probed. Default 250 ms.
        public var initialBackoff: UInt64
        /// The longest wait between two probes. Default 5 s.
        public var maximumBackoff: UInt64
        /// How long a peer that came back must stay up before its backoff is forgotten. Default 10 s.
        public var holdPeriod: UInt64

        /// Creates a configuration; values are clamped to be usable (at least 1 timeout, a backoff of at
        /// least 1 ns, a maximum no smaller than the initial backoff).
        /// - Parameters:
        ///   - timeoutsBeforeDown: timeouts in a row that mark a peer down.
        ///   - initialBackoff: the first wait before probing, in nanoseconds.
        ///   - maximumBackoff: the longest wait, in nanoseconds.
        ///   - holdPeriod: how long a returned peer must stay up to be trusted, in nanoseconds.
        public init(
            timeoutsBeforeDown: Int = 3,
            initialBackoff: UInt64 = 250_000_000,
            maximumBackoff: UInt64 = 5_000_000_000,
            holdPeriod: UInt64 = 10_000_000_000
        ) {
            self.timeoutsBeforeDown = max(1, timeoutsBeforeDown)
            self.initialBackoff = max(1, initialBackoff)
            self.maximumBackoff = max(self.initialBackoff, maximumBackoff)
            self.holdPeriod = holdPeriod
        }
    }

    /// The peer's state.
    public enum State: Sendable, Hashable {
        /// Answering.
        case up
        /// `timeouts` requests in a row timed out (or it would be down but is the last peer standing);
        /// still routed to.
        case suspect(timeouts: Int)
        /// Not routed to; probed at `probeAt` unless `probing`.
        case down(probeAt: UInt64, probing: Bool)
    }

    /// What an event changed, for the caller to act on.
    public enum Transition: Sendable, Hashable {
        /// The peer became suspect (still routed to).
        case becameSuspect
        /// The peer is down: stop routing to it, fail its in-flight forwards, probe it at `probeAt`.
        case wentDown(probeAt: UInt64)
        /// The peer would be down but is the last one not down: it is held suspect.
        case heldSuspect
        /// The peer answered after being down: route to it again (after the stand-in's invalidations).
        case cameUp
        /// A probe failed: probe again at `probeAt`.
        case probeRescheduled(probeAt: UInt64)
    }

    /// The thresholds.
    public let configuration: Configuration
    /// The current state.
    public private(set) var state: State = .up
    /// The current backoff (the last one used, kept through a short recovery).
    public private(set) var backoff: UInt64
    /// When the peer last came back up, while its backoff is still remembered.
    public private(set) var cameUpAt: UInt64?
    /// Whether the peer has answered since this health was created (the node started), or since
    /// ``forgetAnswer()`` (the node reached fewer than a majority). Until it has, it is only assumed up, or
    /// down for reasons that may be the node's own: a node that has just started, or been cut off, does not
    /// know what the others see.
    public private(set) var hasAnswered = false
    /// Whether what this node knows of the peer dates from before it last reached fewer than a majority
    /// (``forgetAnswer()``), with neither an answer nor a refused connection since: the peer may be down in
    /// this node's view only because this node was cut off, while the others still reach it. A refused
    /// connection (its port is closed) settles it; a timeout does not (a partition gives timeouts), nor does a
    /// connection that failed once open (a reset may come from a peer that is alive, as after a partition
    /// heals).
    public private(set) var isStaleSinceCut = false
    /// When the peer last answered (0: never).
    public private(set) var lastAnswerAt: UInt64 = 0
    /// When the peer went down by timeouts, while it stays down that way: nil when it is not down, or went
    /// down by a refused connection (which only a closed port gives). Timeouts may be this node's own
    /// isolation: ``CachetClusterHealth/isDownVerified(_:)`` asks the other peers' answers since.
    public private(set) var downByTimeoutsAt: UInt64?

    /// Creates the health of a peer assumed up.
    /// - Parameter configuration: thresholds and times.
    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.backoff = configuration.initialBackoff
    }

    /// Whether requests may be sent to the peer (up or suspect).
    public var isRoutable: Bool {
        if case .down = state { return false }
        return true
    }

    /// Whether the peer is down.
    public var isDown: Bool { !isRoutable }

    /// When the next probe is due, when the peer is down and no probe is in flight.
    public var probeAt: UInt64? {
        if case .down(let at, false) = state { return at }
        return nil
    }

    /// A reply arrived from the peer (any status), to a forward or a probe.
    /// - Parameter now: the time.
    /// - Returns: ``Transition/cameUp`` when it was down.
    /// - Complexity: O(1).
    public mutating func replied(now: UInt64) -> Transition? {
        hasAnswered = true
        isStaleSinceCut = false
        lastAnswerAt = now
        downByTimeoutsAt = nil
        forgetBackoffIfHeld(now: now)
        switch state {
        case .up:
            return nil
        case .suspect:
            state = .up
            return nil
        case .down:
            state = .up
            cameUpAt = now
            return .cameUp
        }
    }

    /// A forward or a probe timed out.
    /// - Parameters:
    ///   - now: the time.
    ///   - mayGoDown: `false` when the peer must not be marked down (the last peer standing).
    ///   - random: the source of jitter.
    /// - Returns: what changed.
    /// - Complexity: O(1).
    public mutating func timedOut(
        now: UInt64,
        mayGoDown: Bool = true,
        using random: inout some RandomNumberGenerator
    ) -> Transition? {
        forgetBackoffIfHeld(now: now)
        switch state {
        case .up, .suspect:
            let timeouts: Int
            if case .suspect(let count) = state { timeouts = count + 1 } else { timeouts = 1 }
            if timeouts >= configuration.timeoutsBeforeDown {
                let transition = goDown(now: now, mayGoDown: mayGoDown, timeouts: timeouts, using: &random)
                if case .wentDown = transition { downByTimeoutsAt = now }
                return transition
            }
            state = .suspect(timeouts: timeouts)
            return .becameSuspect
        case .down(_, true):
            return probeFailed(now: now, using: &random)
        case .down(_, false):
            return nil
        }
    }

    /// Forgets that the peer answered (``hasAnswered`` false, ``isStaleSinceCut`` true, until it answers
    /// again): what this node saw of it may be out of date, because this node was cut off.
    /// - Complexity: O(1).
    public mutating func forgetAnswer() {
        hasAnswered = false
        isStaleSinceCut = true
    }

    /// A connection to the peer was refused or failed: down at once (or held suspect).
    /// - Parameters:
    ///   - now: the time.
    ///   - mayGoDown: `false` when the peer must not be marked down.
    ///   - certain: the connection was refused (the peer's port is closed), not reset or closed once open
    ///     (``isStaleSinceCut``).
    ///   - random: the source of jitter.
    /// - Returns: what changed.
    /// - Complexity: O(1).
    public mutating func refused(
        now: UInt64,
        mayGoDown: Bool = true,
        certain: Bool = true,
        using random: inout some RandomNumberGenerator
    ) -> Transition? {
        if certain {
            isStaleSinceCut = false
            downByTimeoutsAt = nil
        }
        forgetBackoffIfHeld(now: now)
        switch state {
        case .up, .suspect:
            let timeouts: Int
            if case .suspect(let count) = state { timeouts = count } else { timeouts = 0 }
            return goDown(now: now, mayGoDown: mayGoDown, timeouts: max(timeouts, 1), using: &random)
        case .down(_, true):
            return probeFailed(now: now, using: &random)
        case .down(_, false):
            return nil
        }
    }

    /// Starts a probe if one is due: the caller then connects and sends PING, and reports the outcome
    /// with ``replied(now:)``, ``timedOut(now:mayGoDown:using:)`` or ``refused(now:mayGoDown:using:)``.
    /// - Parameter now: the time.
    /// - Returns: `true` when a probe must be sent now.
    /// - Complexity: O(1).
    public mutating func startProbeIfDue(now: UInt64) -> Bool {
        guard case .down(let at, false) = state, at <= now else { return false }
        state = .down(probeAt: at, probing: true)
        return true
    }

    /// The peer reached this node on its own (it asked something of it) while it is down here and no probe is
    /// in flight: its next probe is due now rather than at the end of its backoff, so that a member that
    /// comes back is seen up within a probe tick of its first word. Nothing changes otherwise.
    /// - Parameter now: the time.
    /// - Complexity: O(1).
    public mutating func probeNow(now: UInt64) {
        guard case .down(let at, false) = state, at > now else { return }
        state = .down(probeAt: now, probing: false)
    }

    private mutating func probeFailed(now: UInt64, using random: inout some RandomNumberGenerator) -> Transition {
        backoff = min(configuration.maximumBackoff, backoff.multipliedReportingOverflow(by: 2).partialValue)
        let at = now &+ Self.jittered(backoff, using: &random)
        state = .down(probeAt: at, probing: false)
        return .probeRescheduled(probeAt: at)
    }

    private mutating func goDown(
        now: UInt64,
        mayGoDown: Bool,
        timeouts: Int,
        using random: inout some RandomNumberGenerator
    ) -> Transition {
        guard mayGoDown else {
            state = .suspect(timeouts: timeouts)
            return .heldSuspect
        }
        if cameUpAt != nil {
            // A relapse within the hold period: keep backing off instead of starting again.
            backoff = min(configuration.maximumBackoff, backoff.multipliedReportingOverflow(by: 2).partialValue)
        } else {
            backoff = configuration.initialBackoff
        }
        cameUpAt = nil
        let at = now &+ Self.jittered(backoff, using: &random)
        state = .down(probeAt: at, probing: false)
        return .wentDown(probeAt: at)
    }

    private mutating func forgetBackoffIfHeld(now: UInt64) {
        if let since = cameUpAt, now >= since &+ configuration.holdPeriod {
            cameUpAt = nil
            backoff = configuration.initialBackoff
        }
    }

    /// A wait between half and all of `backoff`.
    /// - Parameters:
    ///   - backoff: the backoff, at least 1.
    ///   - random: the source of jitter.
    /// - Returns: the wait.
    public static func jittered(_ backoff: UInt64, using random: inout some RandomNumberGenerator) -> UInt64 {
        let half = backoff / 2
        return half + UInt64.random(in: 0...(backoff - half), using: &random)
    }
}
