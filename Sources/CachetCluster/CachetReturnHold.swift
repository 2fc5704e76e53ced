/// The owner's half of failover without stale reads: after a node may have been away (it started, its
/// event loop stalled for longer than a peer's timeout — SIGSTOP, a frozen VM — or it lost every peer and
/// regained one), its peers may have served its keys and not yet delivered their invalidations. For
/// ``holdPeriod`` it answers GETs of the keys it owns with a miss. Pure: the caller reports ticks and
/// events with `now` (monotonic nanoseconds). `Protocol/CLUSTER.md`, "Failover without stale reads".
///
/// While stand-ins are still delivering, the hold lasts longer: every invalidation received while holding
/// (``invalidationReceived(now:)``) keeps it until at least ``quietPeriod`` after that invalidation, but
/// never past ``maximumHold`` after the hold started, so that a stream of invalidations cannot keep the
/// node missing its keys for ever.
///
/// A cluster of one has nobody to stand in for it: create no hold there (it would only cause misses).
public struct CachetReturnHold: Sendable, Hashable {
    /// How long owned keys miss after a return; it must exceed the longest time a peer takes to notice
    /// the return and deliver (its maximum probe backoff plus a forward's timeout).
    public let holdPeriod: UInt64
    /// A gap between two ticks longer than this is a stall (the process was stopped).
    public let stallThreshold: UInt64
    /// How long after the last invalidation received a hold lasts at least: longer than the longest gap
    /// between two invalidations of a stand-in that is still delivering (``recommendedQuietPeriod``).
    public let quietPeriod: UInt64
    /// The longest a hold lasts, from the event that started it, however many invalidations arrive.
    public let maximumHold: UInt64
    /// Until when owned keys miss.
    public private(set) var holdUntil: UInt64
    /// When the hold in force (or the last one) started; extensions end by `holdStart + maximumHold`.
    public private(set) var holdStart: UInt64
    var lastTick: UInt64

    /// Creates the hold of a node starting at `now`: it holds at once, unless it starts with nothing to
    /// serve from before (no value it holds can be older than a stand-in's: every one is written after
    /// the start).
    /// - Parameters:
    ///   - holdPeriod: how long owned keys miss after a return, in nanoseconds.
    ///   - stallThreshold: the gap between ticks that counts as a stall, in nanoseconds.
    ///   - now: the start time.
    ///   - holdingAtStart: whether the node starts with entries from before (its disk tier's); default true.
    ///   - quietPeriod: how long a hold lasts at least after an invalidation received while holding, in
    ///     nanoseconds; 0 (the default) never extends a hold.
    ///   - maximumHold: the longest a hold lasts with its extensions, in nanoseconds; default
    ///     ``maximumHoldFactor`` × `holdPeriod`. Never less than `holdPeriod`.
    public init(
        holdPeriod: UInt64,
        stallThreshold: UInt64,
        now: UInt64,
        holdingAtStart: Bool = true,
        quietPeriod: UInt64 = 0,
        maximumHold: UInt64? = nil
    ) {
        self.holdPeriod = holdPeriod
        self.stallThreshold = stallThreshold
        self.quietPeriod = quietPeriod
        self.maximumHold = max(
            holdPeriod,
            maximumHold ?? holdPeriod.multipliedReportingOverflow(by: Self.maximumHoldFactor).partialValue
        )
        self.holdUntil = holdingAtStart ? now &+ holdPeriod : now
        self.holdStart = now
        self.lastTick = now
    }

    /// How many hold periods a hold lasts at most, extensions included, unless told otherwise.
    public static let maximumHoldFactor: UInt64 = 4

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

    /// The quiet period CLUSTER.md recommends: one forward deadline plus one probe interval. A stand-in
    /// that is still delivering sends each invalidation that was not acknowledged again on its next
    /// delivery round (at most one probe interval apart) after the attempt failed (at the latest when its
    /// forward deadline passed), so two invalidations of a stand-in that keeps delivering are never further
    /// apart than that.
    /// - Parameters:
    ///   - forwardTimeout: the deadline of a forward, in nanoseconds.
    ///   - probeInterval: the interval between a node's probe (and delivery) rounds, in nanoseconds.
    /// - Returns: the quiet period, in nanoseconds.
    public static func recommendedQuietPeriod(forwardTimeout: UInt64, probeInterval: UInt64) -> UInt64 {
        forwardTimeout &+ probeInterval
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

    /// An invalidation from a stand-in (a DEL or CLEAR with the `invalidation` flag) arrived: while
    /// holding, the hold lasts until at least ``quietPeriod`` after now, but not past ``maximumHold`` after
    /// it started. Outside a hold, nothing changes (the node serves its keys already; a late invalidation
    /// only deletes).
    /// - Parameter now: the time.
    /// - Returns: `true` when the hold now ends later than it did.
    @discardableResult
    public mutating func invalidationReceived(now: UInt64) -> Bool {
        guard isHolding(now: now) else { return false }
        let wanted = min(now &+ quietPeriod, holdStart &+ maximumHold)
        guard wanted > holdUntil else { return false }
        holdUntil = wanted
        return true
    }

    /// Whether the peers may be asked to clear the hold now (``release(startedAt:now:)``): while holding, from
    /// ``quietPeriod`` after the hold started. A peer's requests sent to this node before it came back (a
    /// stall, a partition) may still time out until a forward deadline after that, and mark it down there
    /// after the peer said it routes its keys here; asked later, the peer has seen them end.
    /// - Parameter now: the time.
    public func mayAskToRelease(now: UInt64) -> Bool {
        isHolding(now: now) && now >= holdStart &+ quietPeriod
    }

    /// Every peer said, after the hold that started at `start` began and at least ``quietPeriod`` later
    /// (``mayAskToRelease(now:)``), that it routes this node's keys here and owes it nothing
    /// (`Protocol/CLUSTER.md`, "The owner's hold"): nothing a stand-in wrote is left to arrive, and no one
    /// stands in for it any more, so the hold ends now. Nothing changes when another hold started since (a
    /// new absence: the answers are from before it), none is in force, or it is too early.
    /// - Parameters:
    ///   - start: the ``holdStart`` the checks were sent in.
    ///   - now: the time.
    /// - Returns: `true` when the hold ended.
    @discardableResult
    public mutating func release(startedAt start: UInt64, now: UInt64) -> Bool {
        guard start == holdStart, isHolding(now: now), now >= holdStart &+ quietPeriod else { return false }
        holdUntil = now
        return true
    }

    private mutating func hold(now: UInt64) -> Bool {
        // A new reason to hold: the bound on extensions counts from here.
        holdStart = now
        holdUntil = max(holdUntil, now &+ holdPeriod)
        return true
    }
}
