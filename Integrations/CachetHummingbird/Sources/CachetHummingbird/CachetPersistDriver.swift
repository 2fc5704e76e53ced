public import CachetClient
public import Hummingbird

/// A Hummingbird `PersistDriver` that keeps its key/value pairs in a Cachet node or cluster, so that every
/// instance of an app sees the same sessions and persisted values, and they outlive a restart of the app.
///
/// ```swift
/// let persist = try CachetPersistDriver(configuration: .init(nodes: [.init(host: "127.0.0.1")]))
/// let router = Router(context: BasicSessionRequestContext<User.ID, User>.self)
/// router.add(middleware: SessionMiddleware(storage: persist))
/// var app = Application(router: router)
/// app.addServices(persist)          // shuts the client down with the app
/// ```
///
/// - `create` stores only when the key holds nothing (``CachetClient/add(_:value:ttl:)``, atomic at the
///   key's owner) and throws `PersistError.duplicate` otherwise.
/// - `set` with `expires: nil` keeps the expiry of the value it replaces, as the protocol asks: it reads
///   the entry's TTL left from the node (``CachetClient/getWithTTL(_:)-(String)``) before the write. Two
///   such writes racing may keep either one's time; a write with an expiry is one request.
/// - `get` throws `PersistError.invalidConversion` when the stored value is not an `Object`;
///   `getWithTTL` returns the time left, in whole seconds as the node counts them.
/// - The values are exactly what the client's typed calls store (its ``CachetClient/coder``, JSON by
///   default), under `keyPrefix` + the key, and the expiry is the node's TTL: an app on the Vapor driver,
///   or any `client.get(key, as:)`, reads what this driver wrote, and this driver reads what they wrote.
public struct CachetPersistDriver: PersistDriver {
    /// The client every request goes through.
    public let client: CachetClient
    /// Put before every key, so that several apps can share a cluster without meeting each other's keys
    /// (and a user limited to a prefix can be given this one).
    public let keyPrefix: String
    /// Whether the driver made its client, and so shuts it down with itself.
    private let ownsClient: Bool

    /// A driver over a client the app already has; the app shuts that client down.
    /// - Parameters:
    ///   - client: the client.
    ///   - keyPrefix: put before every key; empty by default.
    public init(client: CachetClient, keyPrefix: String = "") {
        self.client = client
        self.keyPrefix = keyPrefix
        self.ownsClient = false
    }

    /// A driver with a client of its own, shut down when the driver is (run it in the app's services).
    /// - Parameters:
    ///   - configuration: the client's nodes, timeouts, TLS and credentials.
    ///   - keyPrefix: put before every key; empty by default.
    /// - Throws: ``CachetClientError`` `invalidConfiguration`.
    public init(configuration: CachetClient.Configuration, keyPrefix: String = "") throws {
        self.client = try CachetClient(configuration: configuration)
        self.keyPrefix = keyPrefix
        self.ownsClient = true
    }

    /// Stores `value` under `key` only if the key holds nothing.
    /// - Throws: `PersistError.duplicate` when it does; a ``CachetClientError`` when the cluster fails.
    public func create<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
        let bytes = try client.encoded(value, for: keyPrefix + key)
        guard try await client.add(keyPrefix + key, value: bytes, ttl: expires) else {
            throw PersistError.duplicate
        }
    }

    /// Stores `value` under `key`, replacing what is there. With `expires` nil, a replaced value's expiry
    /// is kept (none if it had none or there was none).
    public func set<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
        let bytes = try client.encoded(value, for: keyPrefix + key)
        var ttl = expires
        if expires == nil, let current = try await client.getWithTTL(keyPrefix + key) {
            ttl = current.ttl
        }
        try await client.put(keyPrefix + key, value: bytes, ttl: ttl)
    }

    /// The value under `key`, or nil when there is none or it has expired.
    /// - Throws: `PersistError.invalidConversion` when the value is not an `Object`.
    public func get<Object: Codable & Sendable>(key: String, as type: Object.Type) async throws -> Object? {
        try await getWithTTL(key: key, as: type)?.object
    }

    /// The value under `key` and the time it has left (nil for no expiry), or nil when there is none.
    /// - Throws: `PersistError.invalidConversion` when the value is not an `Object`.
    public func getWithTTL<Object: Codable & Sendable>(
        key: String,
        as type: Object.Type
    ) async throws -> (object: Object, ttl: Duration?)? {
        guard let entry = try await client.getWithTTL(keyPrefix + key) else { return nil }
        do {
            return (try client.decoded(type, from: entry.value, for: keyPrefix + key), entry.ttl)
        } catch {
            throw PersistError.invalidConversion
        }
    }

    /// Removes the value under `key`, if any.
    public func remove(key: String) async throws {
        _ = try await client.delete(keyPrefix + key)
    }

    /// Shuts the client down when the driver made it: requests in flight are answered, new ones fail.
    public func shutdown() async throws {
        if ownsClient { await client.shutdown() }
    }
}
