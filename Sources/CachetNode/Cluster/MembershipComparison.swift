import CachetCluster
import CachetLocking
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
    /// Whether any peer was ever seen reading another membership than this node's.
    let sawDisagreement = Atomic<Bool>(false)
    /// Which peers are routable now (set by the probing loop), for ``everyRoutablePeerAgrees``.
    private let routable = CachetLock<[String]?>(nil)

    /// - Parameter membership: the node's membership, whose hash the peers' are compared with.
    init(membership: CachetNodeMembership) {
        self.membership = membership
    }

    /// Records `member`'s membership hash; a change between agreeing and disagreeing with this node's is
    /// logged.
    /// - Parameters:
    ///   - hash: the peer's `cluster_hash`.
    ///   - member: the peer.
    ///   - logger: where the change is logged.
    func record(_ hash: String, of member: CachetClusterMember, logger: Logger) {
        let own = membership.current.membershipHashText
        let differs = hash != own
        seen.withLock { $0[member.id] = hash }
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
