/// How one membership differs from another: what a node logs when it reloads its cluster file, and what
/// a connection pool acts on (connect to the added members, close the removed ones, reconnect the moved).
public struct CachetMembershipChanges: Sendable, Hashable {
    /// Members whose id is new, in ring order.
    public var added: [CachetClusterMember] = []
    /// Members whose id is gone, in ring order, with their old address.
    public var removed: [CachetClusterMember] = []
    /// Members whose id stays but whose host or port changed, with their new address. Their keys stay
    /// with them: the ring places members by id.
    public var moved: [CachetClusterMember] = []
    /// Whether the virtual node count changed, which moves keys between every member.
    public var virtualNodeCountChanged = false

    /// Creates an empty set of changes.
    public init() {}

    /// Whether nothing changed.
    public var isEmpty: Bool {
        added.isEmpty && removed.isEmpty && moved.isEmpty && !virtualNodeCountChanged
    }
}

extension CachetMembershipChanges: CustomStringConvertible {
    /// `added n4@10.0.0.4:7420; removed n1@10.0.0.1:7420; moved n2@10.0.0.9:7420`, or `no changes`.
    public var description: String {
        var parts: [String] = []
        if !added.isEmpty { parts.append("added " + added.map(\.description).joined(separator: ", ")) }
        if !removed.isEmpty { parts.append("removed " + removed.map(\.description).joined(separator: ", ")) }
        if !moved.isEmpty { parts.append("moved " + moved.map(\.description).joined(separator: ", ")) }
        if virtualNodeCountChanged { parts.append("virtual node count changed") }
        return parts.isEmpty ? "no changes" : parts.joined(separator: "; ")
    }
}

extension CachetMembership {
    /// What changed from `old` to this membership.
    /// - Parameter old: the membership before.
    /// - Returns: the members added, removed and moved, and whether the virtual node count changed.
    /// - Complexity: O(n + m) for n and m members (both lists are in id order).
    public func changes(since old: CachetMembership) -> CachetMembershipChanges {
        var result = CachetMembershipChanges()
        result.virtualNodeCountChanged = virtualNodesPerMember != old.virtualNodesPerMember
        let new = members
        let before = old.members
        var i = 0
        var j = 0
        while i < new.count || j < before.count {
            if j == before.count || (i < new.count && new[i].id.utf8.lexicographicallyPrecedes(before[j].id.utf8)) {
                result.added.append(new[i])
                i += 1
            } else if i == new.count || before[j].id.utf8.lexicographicallyPrecedes(new[i].id.utf8) {
                result.removed.append(before[j])
                j += 1
            } else {
                if new[i].host.utf8.elementsEqual(before[j].host.utf8) == false || new[i].port != before[j].port {
                    result.moved.append(new[i])
                }
                i += 1
                j += 1
            }
        }
        return result
    }
}
