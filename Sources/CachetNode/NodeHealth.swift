import CachetCluster
import CachetLocking
import Dispatch

/// The node's view of its peers' health (`Protocol/CLUSTER.md`, "Health"), shared by its loops: fed by the
/// outcome of every forward and of the PING probes (``PeerForwarder``), read by forwarding (a peer marked
/// down is answered UNAVAILABLE at once, not tried), by the cluster-wide fan-out (a member marked down is
/// reported, not asked) and by STATS (each member's `state`). The rules are `CachetClusterHealth`'s:
/// refused → down at once, timeouts → suspect then down, probes with backoff and jitter, flap damping, and
/// never every peer down. A membership change (SIGHUP) starts every peer over as up.
///
/// Thread-safe: one lock around the state; taken once per forward outcome and per routing decision of a
/// forward, never on a request this node serves itself.
final class NodeHealth: Sendable {
    private struct State {
        var generation = -1
        var health: CachetClusterHealth?
        var random = SystemRandomNumberGenerator()
    }

    private let membership: CachetNodeMembership
    private let configuration: CachetPeerHealth.Configuration
    private let state = CachetLock(State())

    /// - Parameters:
    ///   - membership: the node's membership, whose changes reset the view.
    ///   - configuration: thresholds and probe backoffs.
    init(membership: CachetNodeMembership, configuration: CachetPeerHealth.Configuration = .init()) {
        self.membership = membership
        self.configuration = configuration
    }

    /// Whether requests may be sent to `member` (up or suspect, or this node).
    func isRoutable(_ member: CachetClusterMember) -> Bool {
        withHealth { health in
            guard let index = health.membership.index(ofID: member.id) else { return true }
            return health.isRoutable(index)
        } ?? true
    }

    /// `member`'s state for STATS: `self`, `up`, `suspect`, `down`, or `unknown` for an id not in force.
    func state(ofID id: String) -> CachetClusterMemberState {
        withHealth { health in
            guard let index = health.membership.index(ofID: id) else { return .unknown }
            return health.state(of: index)
        } ?? .unknown
    }

    /// Records the outcome of a forward or a probe to `member`.
    func record(_ outcome: ForwardOutcome, from member: CachetClusterMember) {
        let now = DispatchTime.now().uptimeNanoseconds
        withHealth { health, random in
            guard let index = health.membership.index(ofID: member.id) else { return }
            switch outcome {
            case .answered:
                _ = health.replied(index, now: now)
            case .unavailable(_, .timedOut):
                _ = health.timedOut(index, now: now, using: &random)
            case .unavailable(_, .connectionFailed):
                _ = health.refused(index, now: now, using: &random)
            case .unavailable(_, .overloaded), .unavailable(_, .markedDown):
                break
            }
        }
    }

    /// The members to probe now: every routable peer (an active check on the interval), and every down
    /// peer whose backoff has passed (marked as probing until its outcome is recorded).
    func membersToProbe() -> [CachetClusterMember] {
        let now = DispatchTime.now().uptimeNanoseconds
        return withHealth { health, _ in
            let due = Set(health.startDueProbes(now: now))
            return health.membership.members.indices.compactMap { index -> CachetClusterMember? in
                guard index != health.localIndex else { return nil }
                return due.contains(index) || health.isRoutable(index) ? health.membership.members[index] : nil
            }
        } ?? []
    }

    private func withHealth<T>(_ body: (inout CachetClusterHealth) -> T) -> T? {
        withHealth { health, _ in body(&health) }
    }

    private func withHealth<T>(_ body: (inout CachetClusterHealth, inout SystemRandomNumberGenerator) -> T) -> T? {
        let generation = membership.generation
        let snapshot: (nodeID: String, membership: CachetMembership)? =
            state.withLock { $0.generation == generation } ? nil : membership.snapshot()
        return state.withLockUnchecked { state -> T? in
            if let snapshot, state.generation != generation {
                state.health = try? CachetClusterHealth(
                    membership: snapshot.membership,
                    localID: snapshot.nodeID,
                    configuration: configuration
                )
                state.generation = generation
            }
            guard var health = state.health else { return nil }
            state.health = nil
            defer { state.health = health }
            return body(&health, &state.random)
        }
    }
}
