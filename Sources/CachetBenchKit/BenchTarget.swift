import CachetCluster

/// A server to load: its address (an IPv4 or IPv6 address or a host name, and a port) and its name on the
/// hash ring.
public struct BenchTarget: Hashable, Sendable, CustomStringConvertible {
    /// The address: an IPv4 or IPv6 address, or a name to resolve.
    public var host: String
    /// The TCP port.
    public var port: Int
    /// The server's member id on the ring (`Protocol/CLUSTER.md`): `host:port` unless a cluster file names it.
    public var id: String {
        get { name ?? description }
        set { name = newValue }
    }
    /// The id a cluster file gave, if any.
    private var name: String?

    /// Creates a target.
    /// - Parameters:
    ///   - host: an IPv4 or IPv6 address, or a host name.
    ///   - port: the TCP port.
    ///   - id: the ring member id; `host:port` when nil.
    public init(host: String, port: Int, id: String? = nil) {
        self.host = host
        self.port = port
        self.name = id
    }

    /// `host:port`.
    public var description: String { CachetClusterMember.defaultID(host: host, port: port) }

    /// Reads a cluster file, the same JSON file the nodes and CachetClient read (`Protocol/CLUSTER.md`).
    /// - Parameter path: the file.
    /// - Returns: the members as targets, in the ring's member order, and the ring's virtual nodes per member.
    /// - Throws: ``BenchError`` with code `invalidConfiguration` carrying the cluster file's own message
    ///   (unreadable file, bad JSON with its line and column, or an invalid membership).
    public static func targets(
        inClusterFile path: String
    ) throws(BenchError) -> (targets: [BenchTarget], virtualNodesPerMember: Int) {
        let membership: CachetMembership
        do {
            membership = try CachetMembership(contentsOfFile: path)
        } catch {
            throw BenchError(.invalidConfiguration, error.message)
        }
        let targets = membership.members.map { BenchTarget(host: $0.host, port: $0.port, id: $0.id) }
        return (targets, membership.virtualNodesPerMember)
    }
}
