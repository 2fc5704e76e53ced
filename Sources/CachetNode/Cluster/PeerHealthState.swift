import CachetCluster

/// The peers' health as this node sees it (`Protocol/CLUSTER.md`, "Health"): each member's state from the
/// outcomes of forwards and probes, by `CachetClusterHealth`'s rules (refused → down at once, timeouts →
/// suspect then down, probes with backoff and jitter, flap damping, never every peer down), made anew for
/// each membership in force, and the outcomes counted per member for `/metrics`. No lock and no clock:
/// ``NodeHealth`` keeps it under its lock and gives it the time.
struct PeerHealthState {
    /// The membership generation `health` was made for (-1: none yet).
    private(set) var generation = -1
    /// The members' health; nil before the first membership, or when it could not be made for this node.
    var health: CachetClusterHealth?
    /// The probes' jitter.
    var random = SystemRandomNumberGenerator()
    /// Forwards and probes to each member by outcome (`/metrics`), counted with the outcome's record.
    private(set) var outcomes: [String: [String: Int]] = [:]

    /// Makes the health anew for `membership` when `generation` is not the one it was made for: every peer
    /// starts over as up.
    /// - Returns: whether it was made anew.
    mutating func refresh(
        generation: Int,
        membership: (nodeID: String, membership: CachetMembership)?,
        configuration: CachetPeerHealth.Configuration
    ) -> Bool {
        guard let membership, self.generation != generation else { return false }
        health = try? CachetClusterHealth(
            membership: membership.membership,
            localID: membership.nodeID,
            configuration: configuration
        )
        self.generation = generation
        return true
    }

    /// Whether `generation` is the one the health was made for.
    func isCurrent(_ generation: Int) -> Bool { self.generation == generation }

    /// Records `outcome` from member `index` of `health` at `now`, and counts it under `memberID`.
    /// - Returns: the member's transition, if any.
    static func apply(
        _ outcome: ForwardOutcome,
        to index: Int,
        in health: inout CachetClusterHealth,
        now: UInt64,
        random: inout SystemRandomNumberGenerator
    ) -> CachetPeerHealth.Transition? {
        switch outcome {
        case .answered:
            return health.replied(index, now: now)
        case .unavailable(_, .timedOut):
            return health.timedOut(index, now: now, using: &random)
        case .unavailable(_, .refused):
            return health.refused(index, now: now, using: &random)
        case .unavailable(_, .connectionFailed), .unavailable(_, .closed):
            return health.refused(index, now: now, certain: false, using: &random)
        case .unavailable(_, .overloaded) where !health.isRoutable(index):
            // A probe of a down peer that could not be sent: a failed probe, so that another is scheduled
            // (the peer would otherwise stay marked as being probed).
            return health.timedOut(index, now: now, using: &random)
        case .unavailable(_, .overloaded), .unavailable(_, .markedDown):
            return nil
        }
    }

    /// Counts `outcome` of a forward or probe to `memberID`.
    mutating func count(_ outcome: ForwardOutcome, from memberID: String) {
        outcomes[memberID, default: [:]][outcome.metricName, default: 0] += 1
    }
}
