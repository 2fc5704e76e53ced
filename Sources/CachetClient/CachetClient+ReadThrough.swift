import CachetLocking

/// A load in flight for ``CachetClient/get(_:as:ttl:loader:)``: the callers of one client that miss the
/// same key meanwhile wait for it rather than calling their loaders.
final class ReadThroughLoad: Sendable {
    /// The loaded value (for callers of the same type) and its encoded bytes (for the others).
    let task: Task<(value: any Sendable, bytes: [UInt8]), any Error>

    init(task: Task<(value: any Sendable, bytes: [UInt8]), any Error>) {
        self.task = task
    }
}

/// Read-through: a miss calls the caller's loader, stores what it returns, and hands it to every caller
/// that missed the key meanwhile.
extension CachetClient {
    /// The value under `key`, or, on a miss, what `loader` returns, stored under `key` for `ttl` before it
    /// is returned.
    ///
    /// ```swift
    /// let user = try await client.get("user:42", as: User.self, ttl: .seconds(60)) {
    ///     try await database.loadUser(42)          // called by one caller only
    /// }
    /// ```
    ///
    /// Concurrent misses of one key in this client call the loader once: the others wait for its value
    /// (singleflight). Across clients, the node that owns the key gives the first miss a lease and tells
    /// the others to wait for the value (``Protocol/PROTOCOL.md``, "Leases"), so a hot key that expires
    /// reaches the loader about once, whatever the number of consumers; a value loaded while the key was
    /// written or deleted is not stored (it may be older than that write) but still returned.
    ///
    /// - Parameters:
    ///   - key: anything whose `description` is 1 to 4096 bytes of UTF-8.
    ///   - type: the value's type.
    ///   - ttl: how long the loaded value lives in the cache; nil for no expiry.
    ///   - loader: makes the value on a miss (a database query...); its errors are thrown to every caller
    ///     that waited for it, and nothing is stored.
    /// - Returns: the cached or loaded value.
    /// - Throws: the loader's error, or a ``CachetClientError`` (`decodingFailed` for bytes under `key`
    ///   that are not a `type`). A failure to store the loaded value is not thrown: the value is returned.
    public func get<Value: Codable & Sendable>(
        _ key: some CustomStringConvertible,
        as type: Value.Type,
        ttl: Duration? = nil,
        loader: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let name = key.description
        let keyBytes = Array(name.utf8)
        if let value = try await get(keyBytes, as: type) { return value }
        let load = loads.withLock { loads -> ReadThroughLoad in
            if let existing = loads[keyBytes] { return existing }
            let load = ReadThroughLoad(
                task: Task {
                    defer { self.loads.withLock { _ = $0.removeValue(forKey: keyBytes) } }
                    let value = try await loader()
                    let bytes = try self.encoded(value, for: name)
                    do {
                        try await self.put(key: keyBytes, value: bytes, ttl: ttl)
                    } catch {
                        self.logger.debug(
                            "a loaded value was not stored",
                            metadata: ["cachet.key": "\(name)", "error.message": "\(error)"]
                        )
                    }
                    return (value, bytes)
                }
            )
            loads[keyBytes] = load
            return load
        }
        let loaded = try await load.task.value
        if let value = loaded.value as? Value { return value }
        return try decoded(type, from: loaded.bytes, for: name)
    }
}
