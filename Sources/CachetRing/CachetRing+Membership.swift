extension CachetRing {
    /// The ring with `member` added, as if built from scratch with the same virtual node count.
    ///
    /// Only the new member's points are hashed; the existing points are merged with them. Keys move only
    /// to the new member.
    /// - Parameter member: the node's address, such as `"127.0.0.1:7423"`.
    /// - Returns: the new ring.
    /// - Throws: ``CachetRingError`` with code `emptyMemberName` for an empty name, `duplicateMember`
    ///   when `member` is already in the ring.
    /// - Complexity: O(p + v log v) for p points and v = ``virtualNodesPerMember``.
    public func adding(_ member: String) throws(CachetRingError) -> CachetRing {
        guard !member.isEmpty else {
            throw CachetRingError(
                code: .emptyMemberName,
                message: "cannot add a member with an empty name: name the node by its address, such as 127.0.0.1:7420"
            )
        }
        guard index(of: member) == nil else {
            throw CachetRingError(
                code: .duplicateMember,
                message: "\(member) is already a member: add only nodes that are not in the ring"
            )
        }
        // The new member's index in name order; members at or after it move up by one.
        let inserted = members.firstIndex { Self.precedes(member, $0) } ?? members.count
        var newMembers = members
        newMembers.insert(member, at: inserted)

        var added: [Point] = []
        added.reserveCapacity(virtualNodesPerMember)
        Self.appendPoints(of: member, index: UInt32(inserted), count: virtualNodesPerMember, to: &added)
        added.sort()

        let total = pointHashes.count + added.count
        var hashes: [UInt64] = []
        var owners: [UInt32] = []
        hashes.reserveCapacity(total)
        owners.reserveCapacity(total)
        let newIndex = UInt32(inserted)
        var old = 0
        var new = 0
        while old < pointHashes.count || new < added.count {
            let takeOld: Bool
            if old == pointHashes.count {
                takeOld = false
            } else if new == added.count {
                takeOld = true
            } else {
                let oldHash = pointHashes[old]
                let newHash = added[new].hash
                // Equal hashes: name order, which is the order of the (renumbered) member indices.
                takeOld = oldHash < newHash || (oldHash == newHash && pointMembers[old] < newIndex)
            }
            if takeOld {
                let owner = pointMembers[old]
                hashes.append(pointHashes[old])
                owners.append(owner >= newIndex ? owner + 1 : owner)
                old += 1
            } else {
                hashes.append(added[new].hash)
                owners.append(newIndex)
                new += 1
            }
        }
        return CachetRing(
            members: newMembers,
            virtualNodesPerMember: virtualNodesPerMember,
            pointHashes: hashes,
            pointMembers: owners
        )
    }

    /// The ring without `member`, as if built from scratch with the same virtual node count.
    ///
    /// Only the keys `member` owned move; each goes to the member of the next point.
    /// - Parameter member: a member's name.
    /// - Returns: the new ring.
    /// - Throws: ``CachetRingError`` with code `unknownMember` when `member` is not in the ring,
    ///   `noMembers` when it is the only member.
    /// - Complexity: O(p) for p points.
    public func removing(_ member: String) throws(CachetRingError) -> CachetRing {
        guard let removed = index(of: member) else {
            throw CachetRingError(
                code: .unknownMember,
                message: "\(member) is not a member (the ring has \(membersSummary)): remove only a current member"
            )
        }
        guard members.count > 1 else {
            throw CachetRingError(
                code: .noMembers,
                message: "removing \(member) would leave the ring empty: a ring needs at least one member"
            )
        }
        var newMembers = members
        newMembers.remove(at: removed)
        let removedIndex = UInt32(removed)
        var hashes: [UInt64] = []
        var owners: [UInt32] = []
        hashes.reserveCapacity(pointHashes.count - virtualNodesPerMember)
        owners.reserveCapacity(pointHashes.count - virtualNodesPerMember)
        for (hash, owner) in zip(pointHashes, pointMembers) where owner != removedIndex {
            hashes.append(hash)
            owners.append(owner > removedIndex ? owner - 1 : owner)
        }
        return CachetRing(
            members: newMembers,
            virtualNodesPerMember: virtualNodesPerMember,
            pointHashes: hashes,
            pointMembers: owners
        )
    }

    /// The member count and up to five names, for messages.
    var membersSummary: String {
        let shown = members.prefix(5).joined(separator: ", ")
        let count = members.count == 1 ? "1 member" : "\(members.count) members"
        return members.count > 5 ? "\(count): \(shown), ..." : "\(count): \(shown)"
    }
}
