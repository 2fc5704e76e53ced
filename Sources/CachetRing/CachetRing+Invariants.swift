extension CachetRing {
    /// The points in ring order, as (hash, member index) pairs: a test hook, not API.
    package var _points: [(hash: UInt64, member: Int)] {
        zip(pointHashes, pointMembers).map { (hash: $0, member: Int($1)) }
    }

    /// Checks what every ring must hold and stops the process when it does not: members non-empty,
    /// distinct and in byte order; exactly ``virtualNodesPerMember`` points each; points ascending by hash,
    /// then member index; every point where its name says. A test hook, not API.
    /// - Complexity: O(p) XXH64 computations for p points.
    package func _checkInvariants() {
        precondition(!members.isEmpty, "a ring without members")
        precondition(members.allSatisfy { !$0.isEmpty }, "an empty member name")
        for index in members.indices.dropFirst() {
            precondition(Self.precedes(members[index - 1], members[index]), "members out of order at \(index)")
        }
        precondition(pointHashes.count == pointMembers.count, "parallel arrays of different lengths")
        precondition(pointHashes.count == members.count * virtualNodesPerMember, "wrong point count")
        for index in pointHashes.indices.dropFirst() {
            let previous = (pointHashes[index - 1], pointMembers[index - 1])
            precondition(!((pointHashes[index], pointMembers[index]) < previous), "points out of order at \(index)")
        }
        var expected: [Point] = []
        for (index, member) in members.enumerated() {
            Self.appendPoints(of: member, index: UInt32(index), count: virtualNodesPerMember, to: &expected)
        }
        var actual = Set<[UInt64]>()
        for (hash, member) in zip(pointHashes, pointMembers) { actual.insert([hash, UInt64(member)]) }
        for point in expected {
            precondition(actual.contains([point.hash, UInt64(point.member)]), "point \(point) is missing")
        }
    }
}
