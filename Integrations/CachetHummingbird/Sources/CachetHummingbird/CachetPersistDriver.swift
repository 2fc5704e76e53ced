public import CachetClient
import Foundation
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
/// - `set` with `expires: nil` keeps the expiry time of the value it replaces, as the protocol asks:
///   each stored value carries its expiry time (see ``CachetPersistEnvelope``), read back before the
///   write. Two such writes racing may keep either one's time; a write with an expiry is one request.
/// - `get` throws `PersistError.invalidConversion` when the stored value is not an `Object`;
///   `getWithTTL` returns the time left.
/// - The values are what the client's typed calls store (its ``CachetClient/coder``, JSON by default)
///   after a 9-byte header, under `keyPrefix` + the key.
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
        let now = CachetPersistEnvelope.now()
        let bytes = try envelope(value, for: key, expiresAt: expires.map { now + $0.milliseconds })
        guard try await client.add(keyPrefix + key, value: bytes, ttl: expires) else {
            throw PersistError.duplicate
        }
    }

    /// Stores `value` under `key`, replacing what is there. With `expires` nil, a replaced value's expiry
    /// time is kept (none if it had none or there was none).
    public func set<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
        let now = CachetPersistEnvelope.now()
        var expiresAt = expires.map { now + $0.milliseconds }
        if expires == nil, let current = try await client.get(keyPrefix + key) {
            expiresAt = CachetPersistEnvelope(current)?.expiresAt
        }
        var ttl = expires
        if let expiresAt {
            guard expiresAt > now else {
                // The replaced value has just expired: it is gone, and the new value is stored for no time.
                _ = try await client.delete(keyPrefix + key)
                return
            }
            ttl = .milliseconds(expiresAt - now)
        }
        try await client.put(keyPrefix + key, value: try envelope(value, for: key, expiresAt: expiresAt), ttl: ttl)
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
        guard let bytes = try await client.get(keyPrefix + key) else { return nil }
        guard let stored = CachetPersistEnvelope(bytes) else { throw PersistError.invalidConversion }
        var left: Duration?
        if let expiresAt = stored.expiresAt {
            let now = CachetPersistEnvelope.now()
            // The node keeps an entry up to a second past its time (TTLs are whole seconds on the wire).
            guard expiresAt > now else { return nil }
            left = .milliseconds(expiresAt - now)
        }
        do {
            return (try client.decoded(type, from: Array(stored.value), for: keyPrefix + key), left)
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

    /// `value` as the client encodes it, behind the envelope's header.
    private func envelope<Object: Encodable>(_ value: Object, for key: String, expiresAt: Int64?) throws -> [UInt8] {
        CachetPersistEnvelope.encode(try client.encoded(value, for: keyPrefix + key), expiresAt: expiresAt)
    }
}

/// The bytes ``CachetPersistDriver`` stores: a version byte (1), the expiry time as a big-endian 64-bit
/// count of milliseconds since 1970 (0 for none), then the value in the client's coder.
///
/// The node expires the entry too (its TTL rounded up to whole seconds); the time in the value is what
/// lets `set` keep an expiry and `getWithTTL` tell the time left.
public struct CachetPersistEnvelope: Sendable {
    /// Milliseconds since 1970 when the value expires; nil for never.
    public var expiresAt: Int64?
    /// The value's encoded bytes.
    public var value: ArraySlice<UInt8>

    /// The version byte this driver writes.
    public static let version: UInt8 = 1
    /// The header's length in bytes.
    public static let headerLength = 9

    /// Reads an envelope; nil when `bytes` is not one (too short, another version).
    public init?(_ bytes: [UInt8]) {
        guard bytes.count >= Self.headerLength, bytes[0] == Self.version else { return nil }
        let time = bytes[1..<9].reduce(Int64(0)) { $0 << 8 | Int64($1) }
        expiresAt = time == 0 ? nil : time
        value = bytes[Self.headerLength...]
    }

    /// The envelope of `value` expiring at `expiresAt` (milliseconds since 1970, nil for never).
    public static func encode(_ value: [UInt8], expiresAt: Int64?) -> [UInt8] {
        var bytes = [UInt8]()
        bytes.reserveCapacity(headerLength + value.count)
        bytes.append(version)
        let time = UInt64(expiresAt.map { max(1, $0) } ?? 0)
        for shift in stride(from: 56, through: 0, by: -8) {
            bytes.append(UInt8(truncatingIfNeeded: time >> UInt64(shift)))
        }
        bytes.append(contentsOf: value)
        return bytes
    }

    /// Now, in milliseconds since 1970 (the wall clock: every instance of an app reads the same times).
    public static func now() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
}

extension Duration {
    /// The duration in whole milliseconds, rounded up.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    }
}
