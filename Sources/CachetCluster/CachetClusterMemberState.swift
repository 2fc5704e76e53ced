/// What a node knows of a member's health, as STATS reports it (`cluster_members[].state`).
///
/// A struct over its text rather than an enum, so that the states health checking adds (`up`, `down` and
/// the like) break no caller.
public struct CachetClusterMemberState: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    /// The state's name in STATS.
    public var rawValue: String

    /// Creates a state from its name.
    /// - Parameter rawValue: the name, such as `self` or `unknown`.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The member is the node answering.
    public static let local = CachetClusterMemberState(rawValue: "self")
    /// Nothing is known of the member's health: the node does not check its peers yet.
    public static let unknown = CachetClusterMemberState(rawValue: "unknown")

    /// The name.
    public var description: String { rawValue }
}
