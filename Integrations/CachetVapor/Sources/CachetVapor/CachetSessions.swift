public import CachetClient
public import Vapor

/// Vapor's sessions driver on CachetClient: every instance of the app reads the same sessions, and they
/// outlive a restart of the app.
///
/// ```swift
/// app.caches.use(.cachet(configuration))      // or: try app.cachet.use(configuration)
/// app.sessions.use(.cachet)
/// app.middleware.use(app.sessions.middleware)
/// ```
///
/// A session is stored under `keyPrefix` + its id as JSON (its `[String: String]`), and lives `ttl` after
/// its last change: 7 days by default, as Vapor's session cookie. A new session's id is 32 random bytes
/// in base64, stored only if no session has it (``CachetClient/add(_:value:ttl:)``). The client's spans are
/// children of the request's (`request.serviceContext`).
public struct CachetSessions: AsyncSessionDriver {
    /// How long a session lives after its last change unless told: 7 days, as Vapor's session cookie.
    public static let defaultTTL: Duration = .seconds(7 * 24 * 60 * 60)
    /// The key prefix unless told.
    public static let defaultKeyPrefix = "vapor-session:"

    /// The client every request goes through.
    public let client: CachetClient
    /// How long a session lives after its last change; nil for as long as the cache keeps it.
    public let ttl: Duration?
    /// Put before every session id.
    public let keyPrefix: String

    /// A driver over `client`.
    /// - Parameters:
    ///   - client: the client.
    ///   - ttl: how long a session lives after its last change.
    ///   - keyPrefix: put before every session id.
    public init(client: CachetClient, ttl: Duration? = defaultTTL, keyPrefix: String = defaultKeyPrefix) {
        self.client = client
        self.ttl = ttl
        self.keyPrefix = keyPrefix
    }

    /// Stores a new session under a new id.
    /// - Throws: ``CachetClientError``; `serverError` in the unlikely case that 3 random ids were taken.
    public func createSession(_ data: SessionData, for request: Request) async throws -> SessionID {
        let bytes = try JSONEncoder().encode(data)
        for _ in 0..<3 {
            let id = SessionID(string: [UInt8].random(count: 32).base64String())
            let added = try await within(request.serviceContext) {
                try await client.add(keyPrefix + id.string, value: Array(bytes), ttl: ttl)
            }
            if added { return id }
        }
        throw CachetClientError(code: .serverError, message: "three new session ids in a row were taken")
    }

    /// The session with `sessionID`, or nil when there is none (or it expired).
    public func readSession(_ sessionID: SessionID, for request: Request) async throws -> SessionData? {
        let key = keyPrefix + sessionID.string
        guard let bytes = try await within(request.serviceContext, { try await client.get(key) }) else { return nil }
        return try JSONDecoder().decode(SessionData.self, from: Data(bytes))
    }

    /// Replaces the session's data, and starts its `ttl` again.
    public func updateSession(_ sessionID: SessionID, to data: SessionData, for request: Request) async throws
        -> SessionID
    {
        let bytes = Array(try JSONEncoder().encode(data))
        try await within(request.serviceContext) {
            try await client.put(keyPrefix + sessionID.string, value: bytes, ttl: ttl)
        }
        return sessionID
    }

    /// Deletes the session.
    public func deleteSession(_ sessionID: SessionID, for request: Request) async throws {
        _ = try await within(request.serviceContext) { try await client.delete(keyPrefix + sessionID.string) }
    }
}
