import CachetRing

extension CachetMembership {
    /// The membership a node reports in its STATS reply (`Protocol/PROTOCOL.md`, "STATS"): its
    /// `cluster_members` (each member's `id`, `host` and `port`; the other fields, such as `state`, are
    /// this node's view and ignored) and its `cluster_virtual_nodes`. A client that reads it learns the
    /// members the nodes have in force without reading their cluster file; its ``membershipHashText`` is
    /// the node's `cluster_hash`.
    /// - Parameter bytes: the STATS reply's body.
    /// - Throws: ``CachetClusterError``: `invalidJSON`, `missingField` (a node that is not a cluster
    ///   member reports no members), `wrongType`, and every error of ``init(members:virtualNodesPerMember:)``.
    public init(nodeStats bytes: [UInt8]) throws(CachetClusterError) {
        let context = MembershipContext(file: nil, what: "a node's STATS", lines: nil)
        let document: ClusterJSON
        do {
            document = try ClusterJSON.parse(bytes)
        } catch {
            throw context.error(.invalidJSON, "not valid JSON at byte \(error.offset): \(error.reason)")
        }
        guard case .object(let fields) = document.value else {
            throw context.error(.wrongType, "the reply holds \(document.typeName), not an object")
        }
        var elements: [ClusterJSON]?
        var virtualNodes = CachetRing.defaultVirtualNodesPerMember
        for (key, value) in fields {
            switch (key, value.value) {
            case ("cluster_members", .array(let list)): elements = list
            case ("cluster_virtual_nodes", .integer(let count)): virtualNodes = count
            case ("cluster_members", _), ("cluster_virtual_nodes", _):
                throw context.error(.wrongType, "\"\(key)\" is \(value.typeName)")
            default: continue
            }
        }
        guard let elements else {
            throw context.error(.missingField, "no \"cluster_members\": the node is not a member of a cluster")
        }
        var members: [CachetClusterMember] = []
        for (index, element) in elements.enumerated() {
            let fields: ClusterMemberFields
            do throws(ClusterMemberFields.Problem) {
                fields = try ClusterMemberFields(element, strict: false)
            } catch {
                // Read leniently, a member object can only fail to be an object.
                throw context.error(.wrongType, "cluster_members[\(index)] is \(element.typeName)", member: index)
            }
            guard let id = fields.id, let host = fields.host, let port = fields.port else {
                throw context.error(
                    .missingField,
                    "cluster_members[\(index)] lacks its \"id\", \"host\" or \"port\"",
                    member: index
                )
            }
            members.append(CachetClusterMember(id: id, host: host, port: port))
        }
        try self.init(checking: members, virtualNodesPerMember: virtualNodes, context: context)
    }
}
