import CachetCluster

/// What a client routes by: its nodes (each with its connections) and the ring over their ids, replaced
/// as a whole when the cluster's membership changes (``CachetClient/Configuration/membershipRefreshInterval``).
/// A call reads it once, so that the ring's node indices and the nodes it picks always agree.
final class ClientTopology: Sendable {
    /// The nodes, in the order of ``nodes``.
    let members: [CachetClient.Node]
    /// One per member, with its connection slots and health.
    let nodes: [NodeClient]
    /// The ring over the members' ids.
    let router: CachetClientRouter
    /// Every node's slots.
    let slots: [ConnectionSlot]
    /// The members' membership hash (`Protocol/CLUSTER.md`, the `cluster_hash` of nodes that read the
    /// same members); empty when it cannot be computed.
    let membershipHash: String

    init(members: [CachetClient.Node], nodes: [NodeClient], virtualNodesPerMember: Int) throws(CachetClientError) {
        self.members = members
        self.nodes = nodes
        router = try CachetClientRouter(nodes: members, virtualNodesPerMember: virtualNodesPerMember)
        slots = nodes.flatMap(\.slots)
        membershipHash =
            (try? CachetMembership(
                members: members.map { CachetClusterMember(id: $0.id, host: $0.host, port: $0.port) },
                virtualNodesPerMember: virtualNodesPerMember
            ))?.membershipHashText ?? ""
    }
}
