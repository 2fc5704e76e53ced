import CachetCluster
import Logging

/// Whether this node reaches fewer than a majority of the members (`Protocol/CLUSTER.md`, "The minority
/// rule"), as last counted, and how often it has entered the minority: kept by ``NodeHealth`` beside the
/// peers' health it is counted from, recounted only when a peer starts or stops being up.
struct MinorityRule {
    /// This node entered or left the minority.
    struct Change {
        /// True when it entered the minority, false when it left it.
        var entered: Bool
        /// The members it reaches, itself included.
        var reached: Int
        /// The members in force.
        var members: Int
    }

    /// Whether this node reaches fewer than a majority of the members (STATS `in_minority`).
    private(set) var inMinority = false
    /// How often this node has entered the minority since start (STATS `minority_entries`).
    private(set) var entries = 0

    /// Recounts the members `health` reaches. Entering the minority makes `health` forget which peers
    /// answered: what this node saw of its peers may now be its own isolation, and a peer counts as answered
    /// again only once it has.
    /// - Returns: the change, or nil when the node stays on its side.
    mutating func recount(_ health: inout CachetClusterHealth) -> Change? {
        let now = health.isInMinority
        guard now != inMinority else { return nil }
        inMinority = now
        if now {
            entries += 1
            health.forgetAnswers()
        }
        return Change(entered: now, reached: health.reachedMembers, members: health.membership.members.count)
    }
}

extension MinorityRule.Change {
    /// One line for the change: a `warning` on entering the minority (saying what the node does with its own
    /// keys meanwhile), a `notice` on leaving it.
    /// - Parameter holdsOwnKeys: whether the node holds its own keys in the minority (false with
    ///   `--serve-own-keys-in-minority`).
    func log(to logger: Logger?, holdsOwnKeys: Bool) {
        let metadata: Logger.Metadata = ["cluster.reached": "\(reached)", "cluster.members": "\(members)"]
        guard entered else {
            logger?.notice(
                "this node reaches a majority of the cluster's members again; it serves its own keys once its hold ends",
                metadata: metadata
            )
            return
        }
        if holdsOwnKeys {
            logger?.warning(
                "this node reaches fewer than a majority of the cluster's members: it holds its own keys (GETs miss, writes go to a reachable stand-in or are refused) until it reaches a majority again",
                metadata: metadata
            )
        } else {
            logger?.warning(
                "this node reaches fewer than a majority of the cluster's members; it goes on serving its own keys (--serve-own-keys-in-minority), which may return values a stand-in replaced",
                metadata: metadata
            )
        }
    }
}
