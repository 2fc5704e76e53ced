/// The owner's half of failover without stale reads: after a node may have been away (it started, its
/// event loop stalled for longer than a peer's timeout — SIGSTOP, a frozen VM — or it lost every peer and
/// regained one), its peers may have served its keys and not yet delivered their invalidations. For
/// ``holdPeriod`` it answers GETs of the keys it owns with a miss. Pure: the caller reports ticks and
/// events with `now` (monotonic nanoseconds). `Protocol/CLUSTER.md`, "Failover without stale reads".
///
/// A cluster of one has nobody to stand in for it: create no hold there (it would only cause misses).
public struct CachetReturnHold: Sendable, Hashable {
    /// How long owned keys miss after a return; it must exceed the longest time a peer takes to notice
    /// the return and deliver (its maximum probe backoff plus a forward's timeout).
    public let holdPeriod: UInt64
    /// A gap between two ticks longer than this is a stall (the process was stopped).
    public let stallThreshold: UInt64
    /// Until when owned keys miss.
    public private(set) var holdUntil: UInt64
    var lastTick: UInt64

    /// Creates the hold of a node starting at `now`: it holds at once, unless it starts with nothing to
    /// serve from before (no value it holds can be older than a stand-in's: every one is written after
    /// the start).
    /// - Parameters:
    ///   - holdPeriod: how long owned keys miss after a return, in nanoseconds.
    ///   - stallThreshold: the gap between ticks that counts as a stall, in nanoseconds.
    ///   - now: the start time.
    ///   - holdingAtStart: whether the node starts with entries from before (its disk tier's); default true.
    public init(holdPeriod: UInt64, stallThreshold: UInt64, now: UInt64, holdingAtStart: Bool = true) {
        self.holdPeriod = holdPeriod
        self.stallThreshold = stallThreshold
        self.holdUntil = holdingAtStart ? now &+ holdPeriod : now
        self.lastTick = now
    }

    /// The hold CLUSTER.md recommends: twice the longest probe wait plus one forward deadline, so that a
    /// stand-in notices the return and delivers before the hold ends.
    /// - Parameters:
    ///   - health: the peers' health thresholds.
    ///   - forwardTimeout: the deadline of a forward, in nanoseconds.
    /// - Returns: the hold period, in nanoseconds.
    public static func recommendedHoldPeriod(
        health: CachetPeerHealth.Configuration,
        forwardTimeout: UInt64
    ) -> UInt64 {
        health.maximumBackoff.multipliedReportingOverflow(by: 2).partialValue &+ forwardTimeout
    }

    /// Whether a GET of a key this node owns must miss now.
    /// - Parameter now: the time.
    /// - Returns: `true` while holding.
    public func isHolding(now: UInt64) -> Bool { now < holdUntil }

    /// The node's periodic tick (its event loop ran): a gap since the last longer than
    /// ``stallThreshold`` starts a hold.
    /// - Parameter now: the time.
    /// - Returns: `true` when a hold started.
    public mutating func tick(now: UInt64) -> Bool {
        defer { lastTick = max(lastTick, now) }
        guard now > lastTick, now - lastTick > stallThreshold else { return false }
        return hold(now: now)
    }

    /// Every peer had failed and one answers again (the node may have been cut off): start a hold.
    /// - Parameter now: the time.
    /// - Returns: `true` (a hold started or was extended).
    @discardableResult
    public mutating func regainedContact(now: UInt64) -> Bool { hold(now: now) }

    private mutating func hold(now: UInt64) -> Bool {
        holdUntil = max(holdUntil, now &+ holdPeriod)
        return true
    }
}
