import CachetRing

extension CachetMembership {
    /// The text the ``membershipHash`` is computed over, as `Protocol/CLUSTER.md` specifies it: a header
    /// line, the virtual node count, then one line per member in ring order (by the ids' UTF-8 bytes):
    ///
    /// ```
    /// cachet-membership 1
    /// virtual_nodes_per_member 160
    /// member n1 127.0.0.1 7420
    /// member n2 127.0.0.1 7421
    /// ```
    ///
    /// Every line ends with a line feed. Ids and hosts hold no whitespace, so the text is unambiguous.
    public var canonicalText: String {
        Self.canonicalText(members, virtualNodesPerMember)
    }

    /// ``membershipHash`` as 16 lowercase hex digits, most significant first, as STATS reports it.
    public var membershipHashText: String {
        Self.hex(membershipHash)
    }

    static func canonicalText(_ sorted: [CachetClusterMember], _ virtualNodesPerMember: Int) -> String {
        var text = "cachet-membership 1\nvirtual_nodes_per_member \(virtualNodesPerMember)\n"
        for member in sorted {
            text += "member \(member.id) \(member.host) \(member.port)\n"
        }
        return text
    }

    static func hash(canonicalText: String) -> UInt64 {
        Array(canonicalText.utf8).withUnsafeBytes { CachetRing.hash($0) }
    }

    /// 16 lowercase hex digits.
    static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
