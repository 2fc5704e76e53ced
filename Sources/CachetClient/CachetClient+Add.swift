/// Storing only when a key holds nothing, as memcached's `add` and Redis' `SET NX`: what a session store
/// needs to create a session without overwriting another with the same id.
extension CachetClient {
    /// Stores `value`, encoded by the client's ``coder``, under `key` only if the key holds nothing.
    ///
    /// ```swift
    /// if try await client.add("session:\(id)", value: session, ttl: .seconds(3600)) == false {
    ///     // the id is taken: pick another
    /// }
    /// ```
    ///
    /// It rests on the key owner's [leases](../../Protocol/PROTOCOL.md#leases): a GET with the `lease`
    /// flag that misses grants this caller the key's lease, and the PUT that carries it stores only if no
    /// other write or delete of the key came in between. So of several callers that add the same key at
    /// once, at most one stores; the others are answered false (also while a read-through loader of another
    /// client holds the key's lease: it is about to store a value).
    ///
    /// - Parameters:
    ///   - key: anything whose `description` is 1 to 4096 bytes of UTF-8.
    ///   - value: the value (`[UInt8]` and `String` are stored as their bytes).
    ///   - ttl: how long the entry lives; nil for no expiry.
    /// - Returns: true when it was stored, false when the key holds a value or another caller was storing
    ///   one.
    /// - Throws: ``CachetClientError``: `encodingFailed` when the coder refuses the value; `unavailable`
    ///   when the key's owner grants no lease (it has 65,536 outstanding, or predates leases), since the
    ///   value could then not be stored on that condition; else as ``put(_:value:ttl:)-(String,_,_)``.
    public func add<Value: Encodable & Sendable>(
        _ key: some CustomStringConvertible,
        value: Value,
        ttl: Duration? = nil
    ) async throws(CachetClientError) -> Bool {
        let name = key.description
        let bytes = try encoded(value, for: name)
        let keyBytes = Array(name.utf8)
        switch try await leaseGet(keyBytes) {
        case .hit, .wait:
            return false
        case .noLease:
            throw CachetClientError(
                code: .unavailable,
                message: "the owner of \(name) granted no lease, so it cannot store it only if absent",
                node: owner(of: keyBytes).id
            )
        case .lease(let token):
            do {
                try await put(key: keyBytes, value: bytes, ttl: ttl, lease: .put(token))
                return true
            } catch  where error.code == .notStored {
                // A write or delete of the key came in after the miss: it is not absent any more (or was
                // deleted again; either way another caller got there first).
                return false
            }
        }
    }
}
