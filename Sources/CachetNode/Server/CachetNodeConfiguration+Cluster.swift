import CachetCluster

#if canImport(Glibc)
import CachetIO
import Glibc
#endif

extension CachetNodeConfiguration {
    /// Puts the node in the cluster of `file` as member `nodeID` (`--cluster FILE --node-id ID`): reads the
    /// file, and listens on the member's host and port unless `host` or `port` override them.
    /// - Parameters:
    ///   - file: the cluster file's path.
    ///   - nodeID: this node's id in the file.
    ///   - host: `--host`, when given: the address to listen on instead of the member's (such as 0.0.0.0).
    ///   - port: `--port`, when given: the port to listen on instead of the member's.
    /// - Throws: ``CachetNodeError`` `invalidConfiguration` when the file cannot be read or is not a valid
    ///   cluster, when `nodeID` is not one of its members, or when the member's host is not an IP address
    ///   to listen on and `host` is not given.
    public mutating func joinCluster(file: String, nodeID: String, host: String?, port: Int?) throws(CachetNodeError) {
        let membership: CachetMembership
        let member: CachetClusterMember
        do throws(CachetClusterError) {
            membership = try CachetMembership(contentsOfFile: file)
            member = try membership.requireMember(id: nodeID)
        } catch {
            let message =
                error.code == .unknownMember
                ? "--node-id \(nodeID) is not a member of cluster file \(file): \(error.message)" : error.message
            throw CachetNodeError(code: .invalidConfiguration, message: message)
        }
        if let host {
            self.host = host
        } else {
            guard CachetSocketAddress(literal: member.host, port: 0) != nil else {
                throw CachetNodeError(
                    code: .invalidConfiguration,
                    message: "member \(nodeID) of cluster file \(file) has the host \(member.host), which is not "
                        + "an IP address to listen on: give --host (such as --host 0.0.0.0)"
                )
            }
            self.host = member.host
        }
        self.port = port ?? member.port
        self.nodeID = nodeID
        self.cluster = CachetNodeCluster(file: file, membership: membership)
    }

    /// Checks the cluster settings: a cluster needs a node id that is one of its members, and a node id
    /// given without a cluster must be a valid member id.
    func validateCluster() throws(CachetNodeError) {
        if let cluster {
            guard let nodeID else {
                throw CachetNodeError(
                    code: .invalidConfiguration,
                    message: "--cluster needs --node-id: name this node by its id in the cluster file"
                )
            }
            guard cluster.membership.member(id: nodeID) != nil else {
                throw CachetNodeError(
                    code: .invalidConfiguration,
                    message: "--node-id \(nodeID) is not a member of the cluster"
                        + (cluster.file.map { " in \($0)" } ?? "") + ": give one of its ids"
                )
            }
        } else if let nodeID {
            do throws(CachetClusterError) {
                _ = try CachetMembership(members: [CachetClusterMember(id: nodeID, host: host, port: 1)])
            } catch {
                throw CachetNodeError(
                    code: .invalidConfiguration,
                    message: "--node-id \(String(reflecting: nodeID)) is not a valid id: 1 to "
                        + "\(CachetClusterMember.maximumIDLength) bytes without whitespace or control characters"
                )
            }
        }
    }
}
