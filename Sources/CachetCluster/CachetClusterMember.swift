/// One node of a cluster: a stable id, which places it on the ring, and the address it is reached at.
///
/// The ring places a member by its ``id`` alone, so a node that moves to a new address under the same id
/// keeps its keys. The id defaults to `host:port`, the name `Protocol/RING.md` gives a node when no id is
/// chosen. See `Protocol/CLUSTER.md` for the rules a member must follow; ``CachetMembership`` checks them.
public struct CachetClusterMember: Sendable, Hashable {
    /// The longest id accepted, in UTF-8 bytes.
    public static let maximumIDLength = 255
    /// The longest host accepted, in UTF-8 bytes (the longest DNS name).
    public static let maximumHostLength = 253

    /// The member's name on the ring and in logs and STATS: any UTF-8 without whitespace or control
    /// characters, 1 to ``maximumIDLength`` bytes, compared byte for byte (such as `cachet-0` or
    /// `127.0.0.1:7420`).
    public var id: String
    /// The host clients and peers connect to: an IPv4 address or a DNS name, used as written (not resolved
    /// or normalized: `localhost` and `127.0.0.1` are two hosts).
    public var host: String
    /// The TCP port clients and peers connect to, 1 to 65535.
    public var port: Int

    /// Creates a member. Nothing is checked here; ``CachetMembership`` checks every member it is given.
    /// - Parameters:
    ///   - id: the member's id; `nil` names it `host:port`.
    ///   - host: the host to connect to.
    ///   - port: the port to connect to.
    public init(id: String? = nil, host: String, port: Int) {
        self.id = id ?? Self.defaultID(host: host, port: port)
        self.host = host
        self.port = port
    }

    /// `host:port`, such as `127.0.0.1:7420`: where to connect.
    public var address: String { Self.defaultID(host: host, port: port) }

    /// The id a member gets when none is given: `host:port`.
    /// - Parameters:
    ///   - host: the member's host.
    ///   - port: the member's port.
    /// - Returns: `host:port`.
    public static func defaultID(host: String, port: Int) -> String { "\(host):\(port)" }
}

extension CachetClusterMember: CustomStringConvertible {
    /// `id@host:port`, or `host:port` when the id is the address.
    public var description: String { id == address ? address : "\(id)@\(address)" }
}
