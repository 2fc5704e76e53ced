public import CachetCluster

extension CachetClient.Configuration {
    /// A configuration of the nodes of a cluster file, the same file the nodes read (`--cluster`), with
    /// its virtual node count and default timeouts; it follows the membership the nodes report
    /// (``membershipRefreshInterval``), so the file is read only at the start. See `Protocol/CLUSTER.md` for the format.
    /// - Parameter path: the cluster file.
    /// - Throws: ``CachetClientError`` with code `invalidConfiguration` and the cluster file's error
    ///   (naming the file, and the line or member at fault) as its message and underlying error.
    public init(clusterFile path: String) throws(CachetClientError) {
        do {
            self.init(membership: try CachetMembership(contentsOfFile: path))
        } catch {
            throw CachetClientError(code: .invalidConfiguration, message: error.message, underlying: error)
        }
    }

    /// A configuration of the members of a cluster membership, placed on the ring by their ids, that follows
    /// the membership the nodes report (``membershipRefreshInterval``, every 5 s).
    /// - Parameter membership: the cluster's members and virtual node count.
    public init(membership: CachetMembership) {
        self.init(nodes: membership.members.map { CachetClient.Node(host: $0.host, port: $0.port, id: $0.id) })
        virtualNodesPerMember = membership.virtualNodesPerMember
        membershipRefreshInterval = .seconds(5)
    }
}
