import CachetCluster
import Logging

extension CachetClient {
    /// With ``Configuration/membershipRefreshInterval``, asks a node for the cluster's membership at that
    /// interval for as long as the client lives, and follows it (``refreshMembership()``).
    func followMembership() {
        guard let interval = configuration.membershipRefreshInterval else { return }
        Task { [weak self] in
            while true {
                try? await Task.sleep(for: interval)
                guard let self, !self.isShutDownNow else { return }
                await self.refreshMembership()
            }
        }
    }

    /// Asks one node that is up for its STATS and, when the members it reports (`cluster_members`, its
    /// `cluster_hash`) differ from the client's, puts them in force: keys go to their owners among the new
    /// members at once, nodes that stay keep their connections, and the connections of nodes that left
    /// close once the next refresh has passed (a call that picked one before the change finishes on it).
    /// A node that is not a cluster member (no `cluster_members`), or that cannot be reached, changes
    /// nothing.
    /// - Returns: whether the membership changed.
    @discardableResult
    public func refreshMembership() async -> Bool {
        let topology = topology
        let deadline = monotonicNanoseconds() &+ configuration.requestTimeout.nanoseconds
        for node in topology.nodes.shuffled() where node.isUp {
            let outcome = await send(on: node, deadline: deadline) { slot, id, waiter, deadline in
                slot.issue(.bare(.stats), id: id, waiter: waiter, deadline: deadline)
            }
            guard case .reply(.ok, let body) = outcome else { continue }
            guard let membership = try? CachetMembership(nodeStats: body) else { return false }
            guard membership.membershipHashText != topology.membershipHash else { return false }
            return adopt(membership, replacing: topology, reportedBy: node.id)
        }
        return false
    }

    /// Puts `membership` in force in place of `old`.
    private func adopt(_ membership: CachetMembership, replacing old: ClientTopology, reportedBy: String) -> Bool {
        let members = membership.members.map { CachetClient.Node(host: $0.host, port: $0.port, id: $0.id) }
        var nodes: [NodeClient] = []
        for member in members {
            if let kept = old.nodes.first(where: { $0.node == member }) {
                nodes.append(kept)
                continue
            }
            let firstSlot = nextSlot.withLock { next -> Int in
                defer { next += configuration.connectionsPerNode }
                return next
            }
            nodes.append(
                NodeClient(
                    node: member,
                    configuration: configuration,
                    transport: transport,
                    firstSlot: firstSlot,
                    logger: logger,
                    metrics: metrics
                )
            )
        }
        guard
            let topology = try? ClientTopology(
                members: members,
                nodes: nodes,
                virtualNodesPerMember: membership.virtualNodesPerMember
            ),
            topology.membershipHash != old.membershipHash
        else { return false }
        install(topology)
        let left = old.nodes.filter { node in !nodes.contains { $0 === node } }
        logger.info(
            "the cluster's membership changed: keys go to their owners among the new members",
            metadata: [
                "cluster.hash": "\(topology.membershipHash)",
                "cluster.members": "\(members.map(\.id).joined(separator: ", "))",
                "cluster.reported_by": "\(reportedBy)",
            ]
        )
        let transport = transport
        let inForce = topology.nodes
        transport.loop.execute {
            // The tick goes on looking after the nodes that left until their connections have closed; those
            // that left at the change before this one stop taking requests now.
            let retiring = transport.nodes.filter { node in !inForce.contains { $0 === node } }
            for node in retiring where !left.contains(where: { $0 === node }) {
                for slot in node.slots where slot.drain() {
                    slot.closeCurrent(failure: node.leftError())
                }
            }
            let open = retiring.filter { !$0.slots.allSatisfy(\.isShutDown) }
            transport.replace(nodes: inForce + open)
        }
        return true
    }
}
