public import CachetCluster

/// The cluster a node is started in: the membership and the file it was read from.
public struct CachetNodeCluster: Sendable {
    /// The cluster file (`--cluster`), re-read on SIGHUP; `nil` when the membership was given directly.
    public var file: String?
    /// The members.
    public var membership: CachetMembership

    /// Creates a cluster from a membership.
    /// - Parameters:
    ///   - file: the file it was read from, if any.
    ///   - membership: the members.
    public init(file: String?, membership: CachetMembership) {
        self.file = file
        self.membership = membership
    }
}
