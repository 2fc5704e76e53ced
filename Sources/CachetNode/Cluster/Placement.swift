import CachetCluster
import CachetRing

/// Where a request for a key this node does not own goes because of the peers' health and this node's hold
/// (`Protocol/CLUSTER.md`, "Forwarding" and "Failover without stale reads"), and who stands in for this
/// node's own keys while it holds: pure functions of a ``ClusterView``, made under ``NodeHealth``'s lock.
enum Placement: Equatable {
    /// To this member: the owner, or the stand-in when the owner is down.
    case forward(CachetClusterMember)
    /// Served here, under the stand-in rules for the owner with this id: this node stands in for it.
    case standIn(ownerID: String)
    /// The owner answers again and this node has not finished telling it what it wrote for it: a GET
    /// misses (another node may have stood in too, with a newer value), a write goes to the owner.
    case delivering(owner: CachetClusterMember)
    /// This node would stand in, but it holds after an absence: peers that have not seen it come back
    /// send the key to the next stand-in, this member, and so does this node (forwarded requests too),
    /// so that the key has one place until they all see it back.
    case deferred(to: CachetClusterMember)
    /// This node would stand in but cannot vouch for its view: a member before it on the key's preference
    /// list is down only in a view this node formed while cut off (or has not answered since it started),
    /// or, while it holds after an absence, the member after it, where the others send the key, has not
    /// answered it yet (it is only assumed up). A GET misses, a write is refused.
    case unsettled
    /// This node would serve the key here (it would stand in, or a peer forwarded it) but reaches fewer
    /// than a majority of the members: the others may have given the key to another member, which takes
    /// its writes meanwhile. A GET misses, a write is refused.
    case minority

    /// Where a request for `key`, owned by `owner` (not this node), goes: to the owner while it is
    /// routable, else to the first routable member of the key's preference list (this node, or another
    /// one). The stand-in is the same on every node that sees the same members down, whatever each one
    /// stood in for before: a node that still owes an owner invalidations does not keep its keys (two
    /// such nodes would each serve their own copies); it misses them until it has delivered.
    /// While `holding` (asked only when this node would stand in, or the request was `forwarded` by a peer)
    /// says it holds after an absence, it leaves the key to the next routable member after it
    /// (``Placement/deferred(to:)``): a peer that forwarded it here takes this node for the stand-in, and the
    /// others may not see it back yet. In the minority (`inMinority`: the minority rule), it serves no other
    /// member's key at all (``Placement/minority``).
    /// - Parameters:
    ///   - hash: the key's ring hash (`CachetRing.hash`).
    ///   - owner: the key's owner, another member.
    ///   - view: the cluster as this node sees it, with whether `owner` is clean.
    ///   - forwarded: a peer forwarded the request here.
    ///   - inMinority: this node reaches fewer than a majority of the members.
    ///   - holding: whether this node holds after an absence; asked only when the answer matters.
    static func of(
        hash: UInt64,
        owner: CachetClusterMember,
        in view: ClusterView,
        forwarded: Bool = false,
        inMinority: Bool = false,
        holding: () -> Bool = { false }
    ) -> Placement {
        let health = view.health
        let route = health.route(hash: hash)
        let standsIn = route.target == health.localIndex
        if (standsIn || forwarded) && inMinority { return .minority }
        // Standing in on a view this node cannot vouch for (a member before it may be down only because
        // this node was cut off) could make a second place for the key: the others may still send it to
        // that member.
        // A member before it that is down here by timeouts alone, which no majority has confirmed down, is
        // where the others still send the key: the request goes there, as before it went down here (it
        // may only be this node's connection that stalls); one that is down only in a view formed while
        // this node was cut off leaves the key unsettled.
        if route.target != route.owner {
            switch firstUnconfirmedDown(before: route.target, in: health, hash: hash) {
            case nil: break
            case .some(.some(let member)): return .forward(health.membership.members[member])
            case .some(.none): if standsIn { return .unsettled }
            }
        }
        guard (standsIn || forwarded) && holding() else {
            if standsIn { return .standIn(ownerID: owner.id) }
            if route.target == route.owner {
                return view.ownerIsClean ? .forward(owner) : .delivering(owner: owner)
            }
            return .forward(health.membership.members[route.target])
        }
        switch successor(in: health, hash: hash) {
        case .member(let next): return .deferred(to: next)
        case .unanswered: return .unsettled
        case .none: return standsIn ? .standIn(ownerID: owner.id) : .unsettled
        }
    }

    /// The first member before `member` on the key's preference list that is down in a view this node
    /// cannot vouch for: nil when there is none (every one down is known down); `.some(nil)` when it is down
    /// only in a view formed while this node reached fewer than a majority
    /// (``CachetClusterHealth/isStaleSinceCut(_:)``); `.some(index)` when it is down by timeouts that no
    /// majority has confirmed (``CachetClusterHealth/isDownVerified(_:)``): requests may still go to it.
    private static func firstUnconfirmedDown(
        before member: Int,
        in health: CachetClusterHealth,
        hash: UInt64
    ) -> Int?? {
        let list = health.membership.ring.preferenceList(forHash: hash, count: health.membership.members.count)
        for earlier in list {
            if earlier == member { return nil }
            guard !health.isRoutable(earlier) else { continue }
            if health.isStaleSinceCut(earlier) { return .some(nil) }
            if !health.isDownVerified(earlier) { return .some(earlier) }
        }
        return nil
    }

    /// Who takes a key from this node while it holds.
    private enum Successor {
        /// The first routable member after this node on the key's preference list: where the others send
        /// the key once they do not count this node back.
        case member(CachetClusterMember)
        /// That member has not answered this node since it started: it is only assumed up, and skipping it
        /// could pick a member nobody else would.
        case unanswered
        /// No member after this node is routable.
        case none
    }

    /// The first member after this node on the key's preference list that is routable (`up`, with
    /// `upOnly`), and whether it has answered this node since it started (or last reached fewer than a
    /// majority): the one rule for sending a key on while this node holds, for its own keys and for those it
    /// would stand in for. A member before it that is not routable is skipped only when this node's view of
    /// it is its own; one that may be down only because this node was cut off may be where the others send
    /// the key, so the answer is then ``Successor/unanswered`` until it answers or refuses a connection.
    private static func successor(in health: CachetClusterHealth, hash: UInt64, upOnly: Bool = false) -> Successor {
        let list = health.membership.ring.preferenceList(forHash: hash, count: health.membership.members.count)
        for next in list.drop(while: { $0 != health.localIndex }).dropFirst() {
            if upOnly ? health.state(of: next) == .up : health.isRoutable(next) {
                return health.hasAnswered(next) ? .member(health.membership.members[next]) : .unanswered
            }
            if health.isStaleSinceCut(next) || !health.isDownVerified(next) { return .unanswered }
        }
        return .none
    }

    /// Where a request for one of this node's own keys goes while the node holds: the first routable
    /// member after it on the key's preference list, which stands in for it (nil when there is none, or
    /// when that member has not answered it since it started: the node then answers itself, a GET with a
    /// miss, a write refused). While it holds, the node may hold values a stand-in
    /// replaced, and peers that have not seen it return still send its keys to their stand-in: sending its
    /// own there too keeps one place for each key until the stand-ins have told it what they wrote.
    /// - Parameter upOnly: take only a peer that is up, not one that is suspect: in the minority, where the
    ///   peers not up are likely out of reach, a forward to one would only wait for its deadline.
    static func standIn(forOwnKeyHash hash: UInt64, in view: ClusterView, upOnly: Bool = false) -> CachetClusterMember?
    {
        if case .member(let next) = successor(in: view.health, hash: hash, upOnly: upOnly) { return next }
        return nil
    }
}
