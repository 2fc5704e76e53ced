import CachetWire

/// A value read with the time its entry has left (``CachetClient/getWithTTL(_:)-(String)``).
public struct CachetEntryWithTTL: Sendable, Equatable {
    /// The value's bytes.
    public var value: [UInt8]
    /// The time the entry has left, in whole seconds as the node counts them (`Protocol/PROTOCOL.md`,
    /// "TTL"); nil for an entry that never expires.
    public var ttl: Duration?

    /// An entry's value and the time it has left.
    public init(value: [UInt8], ttl: Duration?) {
        self.value = value
        self.ttl = ttl
    }
}

extension CachetClient {
    /// The value under `key` and the time its entry has left, in one request: a GET with the `ttl` flag
    /// (`Protocol/PROTOCOL.md`, "GET with the TTL left"). The expiry is the node's, so every client and
    /// driver that shares the key reads the same value bytes and the same time left; nothing is stored
    /// inside the value.
    ///
    /// ```swift
    /// if let entry = try await client.getWithTTL("session:9") {
    ///     print(entry.value.count, entry.ttl as Any)       // nil: it never expires
    /// }
    /// ```
    /// - Parameter key: 1 to 4096 bytes of UTF-8.
    /// - Returns: the value and its time left, or nil when the key is not stored.
    /// - Throws: ``CachetClientError``; `protocolViolation` when the node's reply is too short to carry a
    ///   TTL (a node older than the `ttl` flag ignores it).
    public func getWithTTL(_ key: String) async throws(CachetClientError) -> CachetEntryWithTTL? {
        try await getWithTTL(key: key.utf8)
    }

    /// ``getWithTTL(_:)-(String)`` for a key of bytes.
    public func getWithTTL(_ key: [UInt8]) async throws(CachetClientError) -> CachetEntryWithTTL? {
        try await getWithTTL(key: key)
    }

    /// The value under `key` decoded by the client's ``coder`` as `type`, and the time its entry has left
    /// (see ``getWithTTL(_:)-(String)``).
    /// - Throws: ``CachetClientError``: `decodingFailed` when the stored bytes are not a `type`, else as
    ///   ``getWithTTL(_:)-(String)``.
    public func getWithTTL<Value: Decodable>(
        _ key: some CustomStringConvertible,
        as type: Value.Type
    ) async throws(CachetClientError) -> (value: Value, ttl: Duration?)? {
        let key = key.description
        guard let entry = try await getWithTTL(key: key.utf8) else { return nil }
        return (try decoded(type, from: entry.value, for: key), entry.ttl)
    }

    func getWithTTL(key: some Collection<UInt8>) async throws(CachetClientError) -> CachetEntryWithTTL? {
        let (status, body, node) = try await flaggedGet(key, .ttlGet)
        switch status {
        case .ok:
            guard body.count >= 4 else {
                throw CachetClientError(
                    code: .protocolViolation,
                    message: "a GET with the ttl flag was answered \(body.count) bytes, too few for the TTL left"
                        + " (a node older than the flag answers the bare value)",
                    node: node
                )
            }
            let seconds = UInt32(body[0]) << 24 | UInt32(body[1]) << 16 | UInt32(body[2]) << 8 | UInt32(body[3])
            return CachetEntryWithTTL(value: Array(body[4...]), ttl: seconds == 0 ? nil : .seconds(seconds))
        case .notFound:
            return nil
        default:
            throw statusError(status, body: body, opcode: .get, node: node)
        }
    }
}
