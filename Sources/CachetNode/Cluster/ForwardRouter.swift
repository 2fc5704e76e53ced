import CachetCluster

/// Decides, on one event loop, whether a request's key is this node's to serve or another member's: the
/// routing rule of `Protocol/CLUSTER.md` ("Forwarding"), for now without health (every member is taken
/// as routable, so a key always goes to its owner on the ring).
///
/// It keeps a snapshot of the membership and renews it when the node's membership changes (a SIGHUP
/// reload), which costs one atomic load per request. Only nodes started with a cluster file of more than
/// one member have a router; a cluster of one never forwards and pays nothing. Used only on its loop's
/// queue.
final class ForwardRouter {
    private let membership: CachetNodeMembership
    private var generation = -1
    private var members: [CachetClusterMember] = []
    private var ring: CachetMembership?
    private var selfIndex = -1

    init(membership: CachetNodeMembership) {
        self.membership = membership
    }

    /// The member that owns `key` when it is not this node; nil when this node owns it.
    /// - Parameter key: the request's key.
    func foreignOwner(of key: UnsafeRawBufferPointer) -> CachetClusterMember? {
        let current = membership.generation
        if current != generation { refresh(current) }
        guard members.count > 1, let ring else { return nil }
        let owner = ring.ring.owner(of: key)
        return owner == selfIndex ? nil : members[owner]
    }

    /// This node's id and the membership in force, for a fan-out to every member.
    func everyone() -> (nodeID: String, membership: CachetMembership) { membership.snapshot() }

    private func refresh(_ generation: Int) {
        let (id, snapshot) = membership.snapshot()
        ring = snapshot
        members = snapshot.members
        selfIndex = snapshot.index(ofID: id) ?? -1
        self.generation = generation
    }
}
