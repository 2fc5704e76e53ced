/// The body of a NOT_FOUND reply to a GET with the ``CachetRequestFlags/lease`` flag
/// (`Protocol/PROTOCOL.md`, "Leases"): `token: u64 | wait_ms: u32`, 12 bytes. A node that does not grant
/// leases answers NOT_FOUND with an empty body, which a client takes as "no lease: load it yourself".
public struct CachetLeaseReply: Hashable, Sendable {
    /// The lease's token, for the PUT of the loaded value; 0 when another caller holds the key's lease.
    public var token: UInt64
    /// With token 0: milliseconds to wait before asking again (the value is likely there by then).
    public var waitMilliseconds: UInt32

    /// Bytes of the encoded body.
    public static let size = 12

    /// The message of a NOT_STORED reply to a PUT whose lease was lost.
    public static let notStoredMessage =
        "not stored: the lease on this key was lost (a DEL, PUT or CLEAR of it since the lease was granted, "
        + "or the lease expired); the value may be older than what the cache holds now"

    /// A reply.
    /// - Parameters:
    ///   - token: the lease's token, or 0.
    ///   - waitMilliseconds: how long to wait before asking again, with token 0.
    public init(token: UInt64, waitMilliseconds: UInt32) {
        self.token = token
        self.waitMilliseconds = waitMilliseconds
    }

    /// Reads a body; nil for one that is not 12 bytes (an empty body: the node granted no lease).
    /// - Parameter body: the NOT_FOUND reply's body.
    public init?(decoding body: some Collection<UInt8>) {
        guard body.count == Self.size else { return nil }
        let bytes = Array(body)
        token = bytes[0..<8].reduce(0) { $0 << 8 | UInt64($1) }
        waitMilliseconds = bytes[8..<12].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// The 12 bytes of the body.
    public var encoded: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.size)
        CachetFrameEncoder.appendBigEndian(token, to: &bytes)
        CachetFrameEncoder.appendBigEndian(waitMilliseconds, to: &bytes)
        return bytes
    }
}
