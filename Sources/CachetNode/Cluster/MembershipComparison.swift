import CachetCluster
import CachetLocking
import Dispatch
import Logging
import Synchronization

/// Which peers read a different cluster file than this node (`Protocol/CLUSTER.md`, "Reloading"): fed with
/// the membership hash (`cluster_hash`) of each routable peer's STATS, which the probing loop asks for every
/// tenth round (``PeerForwarder``), and read by STATS (`cluster_peers_disagreeing`). Nodes whose files
/// differ route keys differently until both read the same one; a change either way is logged once.
///
/// Thread-safe: its own lock, apart from the peers' health.
final class MembershipComparison: Sendable {
    private let membership: CachetNodeMembership
    private let disagreeing = CachetLock<Set<String>>([])
    /// Each peer's membership hash as last seen, by id.
    private let seen = CachetLock<[String: String]>([:])
    /// Each peer's last membership change as it reported it (the hash before, the hash after, and when:
    /// uptime nanoseconds here), by id; none for a peer that has not changed since it started.
    private let changes = CachetLock<[String: (from: String, to: String, at: UInt64)]>([:])
    /// Whether any peer was ever seen reading another membership than this node's.
    let sawDisagreement = Atomic<Bool>(false)
    /// Which peers are routable now (set by the probing loop), for ``everyRoutablePeerAgrees``.
    private let routable = CachetLock<[String]?>(nil)

    /// - Parameter membership: the node's membership, whose hash the peers' are compared with.
    init(membership: CachetNodeMembership) {
        self.membership = membership
    }

    /// Records `member`'s membership hash, and the hash of the one it read before its last change; a change
    /// between agreeing and disagreeing with this node's is logged.
    /// - Parameters:
    ///   - hash: the peer's `cluster_hash`.
    ///   - previousHash: the peer's `cluster_previous_hash` (nil: it has not changed since it started),
    ///     with its `cluster_changed_ms_ago`.
    ///   - member: the peer.
    ///   - logger: where the change is logged.
    func record(
        _ hash: String,
        previous previousHash: (hash: String, millisecondsAgo: UInt64)? = nil,
        of member: CachetClusterMember,
        logger: Logger
    ) {
        let own = membership.current.membershipHashText
        let differs = hash != own
        let now = DispatchTime.now().uptimeNanoseconds
        seen.withLock { $0[member.id] = hash }
        changes.withLock { changes in
            if let previousHash {
                changes[member.id] = (
                    from: previousHash.hash, to: hash,
                    at: now &- min(previousHash.millisecondsAgo, UInt64.max / 1_000_000) * 1_000_000
                )
            } else {
                changes[member.id] = nil
            }
        }
        if differs { sawDisagreement.store(true, ordering: .relaxed) }
        let changed = disagreeing.withLock { peers -> Bool in
            differs ? peers.insert(member.id).inserted : peers.remove(member.id) != nil
        }
        guard changed else { return }
        if differs {
            logger.warning(
                "a peer's membership differs from this node's: keys are routed differently until both read the same cluster file",
                metadata: ["cluster.member": "\(member.id)", "cluster.hash": "\(own)", "cluster.peer_hash": "\(hash)"]
            )
        } else {
            logger.notice(
                "a peer's membership agrees with this node's again",
                metadata: ["cluster.member": "\(member.id)"]
            )
        }
    }

    /// Whether `member` was last seen reading this node's membership.
    func agrees(_ member: String) -> Bool {
        let own = membership.current.membershipHashText
        return seen.withLock { $0[member] == own }
    }

    /// Whether a peer was seen to have changed from the membership hashed `from` to this node's own, and
    /// when (uptime nanoseconds, the latest such change): how a member just added learns that the others
    /// read a membership without it before, whatever the order of its start and their reloads.
    func peerChanged(from previous: String) -> UInt64? {
        let own = membership.current.membershipHashText
        return changes.withLock { changes in
            changes.values.filter { $0.from == previous && $0.to == own }.map(\.at).max()
        }
    }

    /// Records the peers that are routable now (the probing loop, before it asks them for their hash).
    func setRoutable(_ peers: [CachetClusterMember]) {
        routable.withLock { $0 = peers.map(\.id) }
    }

    /// Whether every routable peer was last seen reading this node's membership (false until each has
    /// been asked since this node's last change, and before the first comparison).
    var everyRoutablePeerAgrees: Bool {
        let own = membership.current.membershipHashText
        guard let peers = routable.withLock({ $0 }) else { return false }
        return seen.withLock { seen in peers.allSatisfy { seen[$0] == own } }
    }

    /// Peers whose membership hash, last seen, differs from this node's.
    var disagreeingPeers: Int { disagreeing.withLock { $0.count } }
}
