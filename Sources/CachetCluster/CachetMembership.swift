public import CachetRing

/// The members of a cluster, checked, with the ring that places them and a hash to compare memberships.
///
/// Build one from a cluster file (``init(contentsOfFile:)``, format in `Protocol/CLUSTER.md`), from its
/// bytes (``init(json:)``) or from members (``init(members:virtualNodesPerMember:)``). Every member has a
/// distinct, non-empty id and a distinct address; the ``ring`` places members by id, and ``members`` is
/// sorted in the ring's member order (by the ids' UTF-8 bytes), so an index the ring answers with is an
/// index into ``members``. Two memberships with the same members and virtual node count are equal and
/// have the same ``membershipHash``, whatever order their members were listed in.
public struct CachetMembership: Sendable {
    /// The members, sorted by the UTF-8 bytes of their ids: `members[i].id == ring.members[i]`.
    ///
    /// Setting it rebuilds the ring and the hash, and stops the process when the new list does not make a
    /// cluster (as an out-of-range array subscript does); use ``init(members:virtualNodesPerMember:)`` to
    /// handle that as an error.
    public var members: [CachetClusterMember] {
        get { storage }
        set {
            do {
                self = try CachetMembership(members: newValue, virtualNodesPerMember: virtualNodesPerMember)
            } catch {
                preconditionFailure("CachetMembership.members set to a list that is not a cluster: \(error)")
            }
        }
    }

    /// Points on the ring per member (`virtual_nodes_per_member` in the file; 160 by default).
    public let virtualNodesPerMember: Int
    /// The ring of the members' ids.
    public let ring: CachetRing
    /// XXH64 (seed 0) of ``canonicalText``: equal for equal memberships, and with overwhelming
    /// probability different for different ones. Nodes report it in STATS so that a client or an operator
    /// can tell whether every node runs with the same membership. See `Protocol/CLUSTER.md`.
    public let membershipHash: UInt64

    private var storage: [CachetClusterMember]

    /// Checks `members` and builds their ring.
    /// - Parameters:
    ///   - members: every node of the cluster, in any order.
    ///   - virtualNodesPerMember: points per member on the ring; every node and client of a cluster must
    ///     use the same count.
    /// - Throws: ``CachetClusterError`` naming the member at fault by its position in `members`:
    ///   `noMembers`, `emptyID`, `invalidID`, `duplicateID`, `invalidHost`, `duplicateAddress`,
    ///   `portOutOfRange` or `virtualNodeCountOutOfRange`.
    /// - Complexity: O(n log n + p log p) for n members and p points.
    public init(
        members: [CachetClusterMember],
        virtualNodesPerMember: Int = CachetRing.defaultVirtualNodesPerMember
    ) throws(CachetClusterError) {
        try self.init(
            checking: members,
            virtualNodesPerMember: virtualNodesPerMember,
            context: MembershipContext(file: nil, what: "cluster membership", lines: nil)
        )
    }

    /// The common initializer: `context` says where the members come from, for messages.
    init(
        checking members: [CachetClusterMember],
        virtualNodesPerMember: Int,
        context: MembershipContext
    ) throws(CachetClusterError) {
        try Self.check(members, virtualNodesPerMember: virtualNodesPerMember, context: context)
        let sorted = members.sorted { $0.id.utf8.lexicographicallyPrecedes($1.id.utf8) }
        let ring: CachetRing
        do {
            ring = try CachetRing(members: sorted.map(\.id), virtualNodesPerMember: virtualNodesPerMember)
        } catch {
            // check(_:) has ruled out everything the ring refuses; keep its word if it ever does not.
            throw context.error(.invalidID, error.message, underlying: error)
        }
        self.storage = sorted
        self.virtualNodesPerMember = virtualNodesPerMember
        self.ring = ring
        self.membershipHash = Self.hash(canonicalText: Self.canonicalText(sorted, virtualNodesPerMember))
    }

    // MARK: - Lookup

    /// The position of the member whose id is `id`, in ``members`` and in the ring.
    /// - Parameter id: a member's id, compared byte for byte.
    /// - Returns: its index, or `nil` when no member has that id.
    /// - Complexity: O(log n) for n members.
    public func index(ofID id: String) -> Int? {
        ring.index(of: id)
    }

    /// The member whose id is `id`.
    /// - Parameter id: a member's id, compared byte for byte.
    /// - Returns: the member, or `nil` when no member has that id.
    /// - Complexity: O(log n) for n members.
    public func member(id: String) -> CachetClusterMember? {
        index(ofID: id).map { storage[$0] }
    }

    /// The member whose id is `id`, or an error saying which ids there are.
    /// - Parameter id: a member's id, compared byte for byte.
    /// - Returns: the member.
    /// - Throws: ``CachetClusterError`` `unknownMember` when no member has that id.
    /// - Complexity: O(log n) for n members.
    public func requireMember(id: String) throws(CachetClusterError) -> CachetClusterMember {
        guard let member = member(id: id) else {
            let shown = storage.prefix(8).map { String(reflecting: $0.id) }.joined(separator: ", ")
            let more = storage.count > 8 ? ", ..." : ""
            throw CachetClusterError(
                code: .unknownMember,
                message: "no member has the id \(String(reflecting: id)) (the ids are \(shown)\(more)): "
                    + "give one of them, or add the member to the cluster file"
            )
        }
        return member
    }

    /// The member that owns `key` on the ring.
    /// - Parameter key: the key's bytes.
    /// - Returns: the owner.
    /// - Complexity: O(k + log p) for a key of k bytes and p points.
    public func owner(of key: some Collection<UInt8>) -> CachetClusterMember {
        storage[ring.owner(of: key)]
    }

    /// The member that owns the key whose bytes are the UTF-8 of `key`.
    /// - Parameter key: the key as text.
    /// - Returns: the owner.
    /// - Complexity: O(k + log p) for a key of k bytes and p points.
    public func owner(of key: String) -> CachetClusterMember {
        storage[ring.owner(of: key)]
    }

    /// Up to `count` distinct members in ring order from the owner of `key` (see `Protocol/RING.md`,
    /// "Preference lists"): the owner first, then the members that stand in for it.
    /// - Parameters:
    ///   - key: the key's bytes.
    ///   - count: how many members are wanted.
    /// - Returns: `min(count, members.count)` members, the owner first.
    /// - Complexity: as `CachetRing.preferenceList(for:count:)`.
    public func preferenceList(for key: some Collection<UInt8>, count: Int) -> [CachetClusterMember] {
        ring.preferenceList(for: key, count: count).map { storage[$0] }
    }

    // MARK: - Checking

    /// Checks the rules of `Protocol/CLUSTER.md`, "Members", in file order, so that the first member at
    /// fault is the one named.
    static func check(
        _ members: [CachetClusterMember],
        virtualNodesPerMember: Int,
        context: MembershipContext
    ) throws(CachetClusterError) {
        guard CachetRing.virtualNodesPerMemberRange.contains(virtualNodesPerMember) else {
            let range = CachetRing.virtualNodesPerMemberRange
            throw context.error(
                .virtualNodeCountOutOfRange,
                "virtual_nodes_per_member \(virtualNodesPerMember) is outside \(range.lowerBound)...\(range.upperBound): "
                    + "leave it out for the default, \(CachetRing.defaultVirtualNodesPerMember), unless every node "
                    + "and client of the cluster uses another"
            )
        }
        guard !members.isEmpty else {
            throw context.error(
                .noMembers,
                "the member list is empty: list every node of the cluster, such as "
                    + "{\"id\": \"n1\", \"host\": \"127.0.0.1\", \"port\": 7420}"
            )
        }
        // Ids and hosts are compared as bytes, as the ring compares names.
        var ids: [[UInt8]: Int] = [:]
        var addresses: [[UInt8]: Int] = [:]
        for (index, member) in members.enumerated() {
            let label = context.label(index, member)
            if member.id.isEmpty {
                throw context.error(
                    .emptyID,
                    "\(label): the id is empty: leave \"id\" out to name the member \(member.address), "
                        + "or give it a name such as cachet-0",
                    member: index
                )
            }
            if member.id.utf8.count > CachetClusterMember.maximumIDLength {
                throw context.error(
                    .invalidID,
                    "\(label): the id is \(member.id.utf8.count) bytes long, more than the "
                        + "\(CachetClusterMember.maximumIDLength) allowed: use a shorter name",
                    member: index
                )
            }
            if member.id.unicodeScalars.contains(where: Self.isSpaceOrControl) {
                throw context.error(
                    .invalidID,
                    "\(label): the id contains whitespace or a control character: use a name without them, "
                        + "such as cachet-0",
                    member: index
                )
            }
            if member.host.isEmpty || member.host.utf8.count > CachetClusterMember.maximumHostLength
                || member.host.unicodeScalars.contains(where: Self.isSpaceOrControl)
            {
                throw context.error(
                    .invalidHost,
                    "\(label): the host \(String(reflecting: member.host)) is not a host name: give an IPv4 "
                        + "address or a DNS name of 1 to \(CachetClusterMember.maximumHostLength) bytes without "
                        + "whitespace, such as 127.0.0.1 or cachet-0.cachet",
                    member: index
                )
            }
            guard (1...65535).contains(member.port) else {
                throw context.error(
                    .portOutOfRange,
                    "\(label): port \(member.port) is outside 1...65535: give the TCP port the node listens on",
                    member: index
                )
            }
            let idKey = Array(member.id.utf8)
            if let first = ids[idKey] {
                throw context.error(
                    .duplicateID,
                    "\(label): the id is also \(context.label(first, members[first])): give every member its own id",
                    member: index
                )
            }
            ids[idKey] = index
            let addressKey = Array(member.address.utf8)
            if let first = addresses[addressKey] {
                throw context.error(
                    .duplicateAddress,
                    "\(label): the address \(member.address) is also \(context.label(first, members[first])): "
                        + "give every member its own host and port",
                    member: index
                )
            }
            addresses[addressKey] = index
        }
    }

    /// Whitespace (including Unicode spaces and line separators), a control character, or an invisible
    /// format character (such as a zero-width space), any of which would make two ids look alike.
    static func isSpaceOrControl(_ scalar: Unicode.Scalar) -> Bool {
        let category = scalar.properties.generalCategory
        return scalar.properties.isWhitespace || category == .control || category == .format
    }
}

extension CachetMembership: Hashable {
    /// Whether two memberships have the same members (ids, hosts and ports) and virtual node count.
    /// - Parameters:
    ///   - lhs: a membership.
    ///   - rhs: another membership.
    /// - Returns: `true` when they are the same cluster.
    /// - Complexity: O(n) in the members' total length.
    public static func == (lhs: CachetMembership, rhs: CachetMembership) -> Bool {
        lhs.membershipHash == rhs.membershipHash && lhs.virtualNodesPerMember == rhs.virtualNodesPerMember
            && lhs.storage == rhs.storage
    }

    /// Feeds the membership hash to `hasher`.
    /// - Parameter hasher: the hasher.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(membershipHash)
    }
}

extension CachetMembership: CustomStringConvertible {
    /// The hash and the members, e.g. `CachetMembership(1f0e...; n1@127.0.0.1:7420, n2@127.0.0.1:7421)`.
    public var description: String {
        "CachetMembership(\(membershipHashText); \(storage.map(\.description).joined(separator: ", ")))"
    }
}

/// Where a list of members comes from, for error messages: a file, JSON bytes, or the API.
struct MembershipContext {
    /// The file's path, when there is one.
    var file: String?
    /// How the source is named at the start of a message.
    var what: String
    /// The line of each member in the file, when known.
    var lines: [Int]?

    /// `members[i] (id "x", line 4)`.
    func label(_ index: Int, _ member: CachetClusterMember) -> String {
        var details = ["id \(String(reflecting: member.id))"]
        if let lines, index < lines.count { details.append("line \(lines[index])") }
        return "members[\(index)] (\(details.joined(separator: ", ")))"
    }

    /// An error whose message starts with the source.
    func error(
        _ code: CachetClusterError.Code,
        _ message: String,
        member: Int? = nil,
        underlying: (any Error & Sendable)? = nil
    ) -> CachetClusterError {
        CachetClusterError(
            code: code,
            message: "\(what): \(message)",
            file: file,
            memberIndex: member,
            underlying: underlying
        )
    }
}
