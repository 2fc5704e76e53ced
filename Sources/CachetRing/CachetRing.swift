/// A consistent-hash ring: which member (node) owns a key, and which members follow it.
///
/// Every member is placed on a 64-bit circle at ``virtualNodesPerMember`` points: point `j` of member
/// `m` sits at the XXH64 of the UTF-8 bytes of `"\(m)#\(j)"`. A key belongs to the member of the first
/// point at or after the key's XXH64, wrapping past the largest point to the smallest. Adding or
/// removing a member moves only the keys of the arcs it gains or loses, about `1/n` of them. The exact
/// rules, so that a client in any language routes the same way, are in `Protocol/RING.md`.
///
/// A ring is an immutable value: ``adding(_:)`` and ``removing(_:)`` return a new one. Lookups do not
/// allocate.
///
/// Members are compared and ordered by their UTF-8 bytes, not by Unicode canonical equivalence: the
/// name is hashed byte for byte, so two spellings of the same text are two members.
public struct CachetRing: Sendable {
    /// The virtual node count used when none is given: enough points for every member's share of the
    /// keys to stay within about 20% of the mean with ten members (see `Protocol/RING.md`).
    public static let defaultVirtualNodesPerMember = 160

    /// The virtual node counts a ring accepts.
    public static let virtualNodesPerMemberRange: ClosedRange<Int> = 1...4096

    /// The members, sorted by their UTF-8 bytes whatever the order they were given in, so that every
    /// ring with the same members numbers them the same way. `owner(of:)` and `preferenceList(for:count:)`
    /// answer with indices into this array.
    public let members: [String]

    /// Points on the circle per member.
    public let virtualNodesPerMember: Int

    /// The position of every point, ascending; ties are ordered by member index, then point number.
    let pointHashes: [UInt64]
    /// `pointMembers[i]` is the index in ``members`` of the member of point `i`.
    let pointMembers: [UInt32]

    /// Builds the ring of `members`.
    /// - Parameters:
    ///   - members: the nodes, each named by its address, such as `"127.0.0.1:7420"`; in any order.
    ///   - virtualNodesPerMember: points per member, in ``virtualNodesPerMemberRange``; more points
    ///     spread keys more evenly and make the ring larger. Every client of a cluster must use the same
    ///     count.
    /// - Throws: ``CachetRingError`` with code `noMembers` when `members` is empty, `emptyMemberName`
    ///   for an empty name, `duplicateMember` for a name given twice, `virtualNodeCountOutOfRange` for a
    ///   count outside ``virtualNodesPerMemberRange``.
    /// - Complexity: O(p log p) for p = `members.count` × `virtualNodesPerMember` points.
    public init(
        members: [String],
        virtualNodesPerMember: Int = CachetRing.defaultVirtualNodesPerMember
    ) throws(CachetRingError) {
        try Self.validate(virtualNodesPerMember: virtualNodesPerMember)
        guard !members.isEmpty else {
            throw CachetRingError(
                code: .noMembers,
                message: "a ring needs at least one member: name every node by its address, such as 127.0.0.1:7420"
            )
        }
        for (position, member) in members.enumerated() where member.isEmpty {
            throw CachetRingError(
                code: .emptyMemberName,
                message: "member \(position) of \(members.count) is an empty string: "
                    + "name every node by its address, such as 127.0.0.1:7420"
            )
        }
        let sorted = members.sorted(by: Self.precedes)
        for index in sorted.indices.dropFirst() where Self.same(sorted[index - 1], sorted[index]) {
            throw CachetRingError(
                code: .duplicateMember,
                message: "member \(sorted[index]) is named twice: list every node once"
            )
        }

        var points: [Point] = []
        points.reserveCapacity(sorted.count * virtualNodesPerMember)
        for (index, member) in sorted.enumerated() {
            Self.appendPoints(of: member, index: UInt32(index), count: virtualNodesPerMember, to: &points)
        }
        points.sort()
        self.init(
            members: sorted,
            virtualNodesPerMember: virtualNodesPerMember,
            pointHashes: points.map(\.hash),
            pointMembers: points.map(\.member)
        )
    }

    init(members: [String], virtualNodesPerMember: Int, pointHashes: [UInt64], pointMembers: [UInt32]) {
        self.members = members
        self.virtualNodesPerMember = virtualNodesPerMember
        self.pointHashes = pointHashes
        self.pointMembers = pointMembers
    }

    /// The number of points on the circle: `members.count` × ``virtualNodesPerMember``.
    public var pointCount: Int { pointHashes.count }

    /// The index in ``members`` of `member`, compared by UTF-8 bytes.
    /// - Parameter member: a member's name.
    /// - Returns: its index, or `nil` when it is not a member.
    /// - Complexity: O(log n) comparisons of names, for n members.
    public func index(of member: String) -> Int? {
        var low = 0
        var high = members.count
        while low < high {
            let middle = low + (high - low) / 2
            if Self.precedes(members[middle], member) { low = middle + 1 } else { high = middle }
        }
        return low < members.count && Self.same(members[low], member) ? low : nil
    }

    // MARK: - Lookup

    /// The member that owns the key whose XXH64 is `hash`: the member of the first point at or after
    /// `hash`, or of the first point when `hash` is past the last.
    /// - Parameter hash: `CachetRing.hash(key)`.
    /// - Returns: an index into ``members``.
    /// - Complexity: O(log p) for p points; allocates nothing.
    public func owner(ofHash hash: UInt64) -> Int {
        pointMembers.withUnsafeBufferPointer { Int($0[firstPoint(atOrAfter: hash)]) }
    }

    /// The member that owns `key`.
    /// - Parameter key: the key's bytes.
    /// - Returns: an index into ``members``.
    /// - Complexity: O(k + log p) for a key of k bytes and p points; allocates nothing.
    public func owner(of key: UnsafeRawBufferPointer) -> Int {
        owner(ofHash: XXH64.hash(key, seed: 0))
    }

    /// The member that owns `key`.
    /// - Parameter key: the key's bytes.
    /// - Returns: an index into ``members``.
    /// - Complexity: O(k + log p) for a key of k bytes and p points; allocates nothing when the
    ///   collection has contiguous storage (an array, a native string's UTF-8 view), copies the key once
    ///   otherwise.
    @inlinable
    public func owner(of key: some Collection<UInt8>) -> Int {
        if let owner = key.withContiguousStorageIfAvailable({ owner(of: UnsafeRawBufferPointer($0)) }) {
            return owner
        }
        return Array(key).withUnsafeBytes { owner(of: $0) }
    }

    /// The member that owns the key whose bytes are the UTF-8 of `key`.
    /// - Parameter key: the key as text.
    /// - Returns: an index into ``members``.
    /// - Complexity: O(k + log p) for a key of k bytes and p points; allocates nothing for a native string.
    @inlinable
    public func owner(of key: String) -> Int {
        owner(of: key.utf8)
    }

    /// Up to `count` distinct members in ring order from the owner of the key whose XXH64 is `hash`:
    /// the owner first, then the member of each following point that is not yet listed, wrapping around.
    /// - Parameters:
    ///   - hash: `CachetRing.hash(key)`.
    ///   - count: how many members are wanted; fewer are returned when the ring has fewer.
    /// - Returns: `min(count, members.count)` distinct indices into ``members``, the owner first;
    ///   empty for a `count` of 0 or less.
    /// - Complexity: O(log p + w) for p points, where w ≤ p is the number of points walked until `count`
    ///   distinct members are found (about `count` × `members.count` / 2 for large counts, close to
    ///   `count` for small ones).
    public func preferenceList(forHash hash: UInt64, count: Int) -> [Int] {
        let wanted = min(max(count, 0), members.count)
        guard wanted > 0 else { return [] }
        var result: [Int] = []
        result.reserveCapacity(wanted)
        let start = firstPoint(atOrAfter: hash)
        pointMembers.withUnsafeBufferPointer { pointMembers in
            if wanted <= 16 {
                var point = start
                while result.count < wanted {
                    let member = Int(pointMembers[point])
                    if !result.contains(member) { result.append(member) }
                    point = point + 1 == pointMembers.count ? 0 : point + 1
                }
            } else {
                var listed = [Bool](repeating: false, count: members.count)
                var point = start
                while result.count < wanted {
                    let member = Int(pointMembers[point])
                    if !listed[member] {
                        listed[member] = true
                        result.append(member)
                    }
                    point = point + 1 == pointMembers.count ? 0 : point + 1
                }
            }
        }
        return result
    }

    /// Up to `count` distinct members in ring order from the owner of `key`, for failover and replicas:
    /// the owner first, then the member of each following point that is not yet listed, wrapping around.
    /// - Parameters:
    ///   - key: the key's bytes.
    ///   - count: how many members are wanted; fewer are returned when the ring has fewer.
    /// - Returns: `min(count, members.count)` distinct indices into ``members``, the owner first;
    ///   empty for a `count` of 0 or less.
    /// - Complexity: O(k + log p + w) for a key of k bytes and p points, where w ≤ p is the number of
    ///   points walked (see ``preferenceList(forHash:count:)``).
    public func preferenceList(for key: UnsafeRawBufferPointer, count: Int) -> [Int] {
        preferenceList(forHash: XXH64.hash(key, seed: 0), count: count)
    }

    /// Up to `count` distinct members in ring order from the owner of `key`.
    /// - Parameters:
    ///   - key: the key's bytes.
    ///   - count: how many members are wanted; fewer are returned when the ring has fewer.
    /// - Returns: `min(count, members.count)` distinct indices into ``members``, the owner first.
    /// - Complexity: as ``preferenceList(forHash:count:)``, plus O(k) for a key of k bytes.
    @inlinable
    public func preferenceList(for key: some Collection<UInt8>, count: Int) -> [Int] {
        if let list = key.withContiguousStorageIfAvailable({
            preferenceList(for: UnsafeRawBufferPointer($0), count: count)
        }) {
            return list
        }
        return Array(key).withUnsafeBytes { preferenceList(for: $0, count: count) }
    }

    /// Up to `count` distinct members in ring order from the owner of the key whose bytes are the UTF-8
    /// of `key`.
    /// - Parameters:
    ///   - key: the key as text.
    ///   - count: how many members are wanted; fewer are returned when the ring has fewer.
    /// - Returns: `min(count, members.count)` distinct indices into ``members``, the owner first.
    /// - Complexity: as ``preferenceList(forHash:count:)``, plus O(k) for a key of k bytes.
    @inlinable
    public func preferenceList(for key: String, count: Int) -> [Int] {
        preferenceList(for: key.utf8, count: count)
    }

    /// The index of the first point whose hash is at least `hash`, or 0 when there is none.
    @inline(__always)
    func firstPoint(atOrAfter hash: UInt64) -> Int {
        pointHashes.withUnsafeBufferPointer { hashes in
            var low = 0
            var count = hashes.count
            while count > 0 {
                let half = count / 2
                if hashes[low + half] < hash {
                    low += half + 1
                    count -= half + 1
                } else {
                    count = half
                }
            }
            return low == hashes.count ? 0 : low
        }
    }

    // MARK: - Building

    /// One point while a ring is built: ordered by hash, then member index (the members are sorted by
    /// name, so this is name order), then point number.
    struct Point: Comparable {
        var hash: UInt64
        var member: UInt32
        var number: UInt32

        static func < (lhs: Point, rhs: Point) -> Bool {
            (lhs.hash, lhs.member, lhs.number) < (rhs.hash, rhs.member, rhs.number)
        }
    }

    /// Appends the `count` points of `member`, numbered 0 to `count - 1`, unsorted.
    static func appendPoints(of member: String, index: UInt32, count: Int, to points: inout [Point]) {
        var name = Array(member.utf8)
        name.append(UInt8(ascii: "#"))
        let prefixLength = name.count
        for number in 0..<count {
            name.removeSubrange(prefixLength...)
            appendDecimal(number, to: &name)
            let hash = name.withUnsafeBytes { XXH64.hash($0, seed: 0) }
            points.append(Point(hash: hash, member: index, number: UInt32(number)))
        }
    }

    /// Appends the decimal digits of `value` (no sign, no leading zeros) as ASCII.
    static func appendDecimal(_ value: Int, to bytes: inout [UInt8]) {
        var divisor = 1
        while divisor <= value / 10 { divisor *= 10 }
        var rest = value
        while divisor > 0 {
            bytes.append(UInt8(ascii: "0") + UInt8(rest / divisor))
            rest %= divisor
            divisor /= 10
        }
    }

    static func validate(virtualNodesPerMember: Int) throws(CachetRingError) {
        guard virtualNodesPerMemberRange.contains(virtualNodesPerMember) else {
            throw CachetRingError(
                code: .virtualNodeCountOutOfRange,
                message: "virtualNodesPerMember \(virtualNodesPerMember) is outside "
                    + "\(virtualNodesPerMemberRange.lowerBound)...\(virtualNodesPerMemberRange.upperBound): "
                    + "use \(defaultVirtualNodesPerMember), the default, unless every client agrees on another"
            )
        }
    }

    /// Name order: by UTF-8 bytes.
    static func precedes(_ lhs: String, _ rhs: String) -> Bool {
        lhs.utf8.lexicographicallyPrecedes(rhs.utf8)
    }

    /// Name identity: the same UTF-8 bytes.
    static func same(_ lhs: String, _ rhs: String) -> Bool {
        lhs.utf8.elementsEqual(rhs.utf8)
    }
}

extension CachetRing: Hashable {
    /// Whether two rings have the same members, byte for byte, and the same virtual node count, and so
    /// route every key the same way.
    /// - Parameters:
    ///   - lhs: a ring.
    ///   - rhs: another ring.
    /// - Returns: `true` when they are the same ring.
    /// - Complexity: O(n) in the members' total length.
    public static func == (lhs: CachetRing, rhs: CachetRing) -> Bool {
        lhs.virtualNodesPerMember == rhs.virtualNodesPerMember && lhs.members.count == rhs.members.count
            && zip(lhs.members, rhs.members).allSatisfy { same($0, $1) }
    }

    /// Feeds the virtual node count and the members' bytes to `hasher`.
    /// - Parameter hasher: the hasher.
    /// - Complexity: O(n) in the members' total length.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(virtualNodesPerMember)
        hasher.combine(members.count)
        for member in members {
            hasher.combine(member.utf8.count)
            for byte in member.utf8 { hasher.combine(byte) }
        }
    }
}

extension CachetRing: CustomStringConvertible {
    /// The members and the virtual node count, e.g. `CachetRing(127.0.0.1:7420, 127.0.0.1:7421; 160 points each)`.
    public var description: String {
        "CachetRing(\(members.joined(separator: ", ")); \(virtualNodesPerMember) points each)"
    }
}
