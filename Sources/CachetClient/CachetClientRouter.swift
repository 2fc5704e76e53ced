import CachetRing

/// Which node serves a key: its owner on the ring (`Protocol/RING.md`), or, when the owner is down and
/// failover is on, the first node of the key's preference list that is up. Pure: availability is asked
/// of a closure.
struct CachetClientRouter: Sendable {
    /// The ring of the configured nodes' ids.
    let ring: CachetRing
    /// `nodeForMember[m]` is the index in the configuration's nodes of ring member `m`.
    let nodeForMember: [Int]

    init(nodes: [CachetClient.Node], virtualNodesPerMember: Int) throws(CachetClientError) {
        do {
            ring = try CachetRing(members: nodes.map(\.id), virtualNodesPerMember: virtualNodesPerMember)
        } catch {
            throw CachetClientError(code: .invalidConfiguration, message: error.message, underlying: error)
        }
        var map = [Int](repeating: 0, count: nodes.count)
        for (index, node) in nodes.enumerated() {
            // The ring was built from these ids, so every one is a member.
            map[ring.index(of: node.id)!] = index
        }
        nodeForMember = map
    }

    /// The node that owns `key`, whatever its health.
    /// - Complexity: O(k + log p); allocates nothing.
    func owner(of key: UnsafeRawBufferPointer) -> Int {
        nodeForMember[ring.owner(of: key)]
    }

    /// The node that serves `key`: its owner if up; else, with `failover`, the first node of its
    /// preference list that is up; nil when none is.
    /// - Complexity: O(k + log p) without allocating when the owner is up; the preference list otherwise.
    func route(_ key: UnsafeRawBufferPointer, failover: Bool, isUp: (Int) -> Bool) -> Int? {
        let hash = CachetRing.hash(key)
        let owner = nodeForMember[ring.owner(ofHash: hash)]
        if isUp(owner) { return owner }
        guard failover else { return nil }
        for member in ring.preferenceList(forHash: hash, count: ring.members.count).dropFirst() {
            let node = nodeForMember[member]
            if isUp(node) { return node }
        }
        return nil
    }
}
