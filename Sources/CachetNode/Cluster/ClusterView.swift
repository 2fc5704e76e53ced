import CachetCluster

/// What routing needs of the cluster's state to place one key, copied under ``NodeHealth``'s lock in one
/// piece: the peers' health (who is up, who answered, whose state this node can vouch for) and whether the
/// key's owner has been told everything this node wrote for it. Immutable, so that placement
/// (``Placement/of(hash:owner:in:forwarded:inMinority:holding:)``) is a pure function of it, testable without
/// a node.
struct ClusterView: Sendable {
    /// The members' health, as this node saw it when the view was made.
    let health: CachetClusterHealth
    /// Whether the key's owner has been told everything this node wrote for it (its stand-in log is clean
    /// for that owner): a write of its key may go to it.
    let ownerIsClean: Bool

    init(health: CachetClusterHealth, ownerIsClean: Bool = true) {
        self.health = health
        self.ownerIsClean = ownerIsClean
    }
}
