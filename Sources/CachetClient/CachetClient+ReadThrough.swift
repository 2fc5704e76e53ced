import CachetLocking
import CachetWire

/// How a keyed request takes part in read-through leases (`Protocol/PROTOCOL.md`, "Leases"), or asks for
/// the TTL left.
enum ClientLease {
    /// A plain request.
    case none
    /// A GET that asks for the key's lease if it misses.
    case get
    /// A PUT with the lease token a GET's miss granted.
    case put(UInt64)
    /// Not a lease: a GET with the `ttl` flag, whose OK reply carries the TTL left before the value
    /// (`Protocol/PROTOCOL.md`, "GET with the TTL left").
    case ttlGet
    /// Not a lease: a GET with the `range` flag, whose body carries the range after the key and whose OK reply
    /// carries the value's length before the range's bytes (`Protocol/PROTOCOL.md`, "GET of a range").
    case rangeGet
    /// Not a lease: a PUT with the `part` flag, whose value field is a part of a value sent in parts
    /// (`Protocol/PROTOCOL.md`, "PUT in parts").
    case part
}

/// What a GET with the `lease` flag came to.
enum LeaseAnswer {
    /// The value's bytes.
    case hit([UInt8])
    /// A miss, and this caller holds the key's lease: load, then PUT with the token.
    case lease(UInt64)
    /// A miss while another caller loads: ask again after this many milliseconds.
    case wait(UInt32)
    /// A miss and no lease (a node without leases, or with too many outstanding): load.
    case noLease
}

/// A load in flight for ``CachetClient/get(_:as:ttl:loader:)``: the callers of one client that miss the
/// same key meanwhile wait for it rather than calling their loaders.
final class ReadThroughLoad: Sendable {
    /// The loaded value, when this client loaded it (for callers of the same type), and its encoded bytes.
    let task: Task<(value: (any Sendable)?, bytes: [UInt8]), any Error>

    init(task: Task<(value: (any Sendable)?, bytes: [UInt8]), any Error>) {
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
        let first = try await leaseGet(keyBytes)
        if case .hit(let bytes) = first { return try decoded(type, from: bytes, for: name) }
        let load = loads.withLock { loads -> ReadThroughLoad in
            if let existing = loads[keyBytes] { return existing }
            let load = ReadThroughLoad(
                task: Task {
                    defer { self.loads.withLock { _ = $0.removeValue(forKey: keyBytes) } }
                    return try await self.readThrough(keyBytes, name: name, ttl: ttl, first: first, loader: loader)
                }
            )
            loads[keyBytes] = load
            return load
        }
        let loaded = try await load.task.value
        if let value = loaded.value as? Value { return value }
        return try decoded(type, from: loaded.bytes, for: name)
    }

    /// A miss of `key`, from `first` on: waits while another caller (of any client) holds the key's lease
    /// and takes the value it stores, or loads and stores the value itself with its lease.
    private func readThrough<Value: Codable & Sendable>(
        _ key: [UInt8],
        name: String,
        ttl: Duration?,
        first: LeaseAnswer,
        loader: @Sendable () async throws -> Value
    ) async throws -> (value: (any Sendable)?, bytes: [UInt8]) {
        var answer = first
        while true {
            switch answer {
            case .hit(let bytes):
                return (nil, bytes)
            case .wait(let milliseconds):
                // The holder's lease ends at the node's --lease-time at the latest: then this caller (or
                // another) is granted the next one.
                try await Task.sleep(for: .milliseconds(Int(max(1, min(milliseconds, 1000)))))
                answer = try await leaseGet(key)
            case .lease(let token):
                let value = try await loader()
                let bytes = try encoded(value, for: name)
                await store(key, bytes, ttl: ttl, lease: .put(token), name: name)
                return (value, bytes)
            case .noLease:
                let value = try await loader()
                let bytes = try encoded(value, for: name)
                await store(key, bytes, ttl: ttl, lease: .none, name: name)
                return (value, bytes)
            }
        }
    }

    /// Stores a loaded value; a failure (NOT_STORED: the key was written since the lease was granted) is
    /// logged, not thrown: the caller has its value.
    private func store(_ key: [UInt8], _ bytes: [UInt8], ttl: Duration?, lease: ClientLease, name: String) async {
        do {
            try await put(key: key, value: bytes, ttl: ttl, lease: lease)
        } catch {
            logger.debug(
                "a loaded value was not stored",
                metadata: ["cachet.key": "\(name)", "error.message": "\(error)"]
            )
        }
    }

    /// A GET with the `lease` flag.
    func leaseGet(_ key: [UInt8]) async throws(CachetClientError) -> LeaseAnswer {
        let (status, body, node) = try await flaggedGet(key, .get)
        switch status {
        case .ok: return .hit(body)
        case .notFound:
            guard let reply = CachetLeaseReply(decoding: body) else { return .noLease }
            return reply.token == 0 ? .wait(reply.waitMilliseconds) : .lease(reply.token)
        default: throw statusError(status, body: body, opcode: .get, node: node)
        }
    }

    /// A GET of `key` with a flag (`lease`, or `ttl`), validated first: the reply's status, body and node.
    func flaggedGet(
        _ key: some Collection<UInt8>,
        _ flag: ClientLease
    ) async throws(CachetClientError) -> (CachetStatus, [UInt8], String) {
        try withBytes(key) { (key) throws(CachetClientError) in try ClientRequest.validate(key: key) }
        return try await execute(key: key, value: EmptyCollection(), opcode: .get, ttl: 0, lease: flag)
    }
}
