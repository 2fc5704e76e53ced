public import CachetClient
public import Tracing
public import Vapor

/// Vapor's `Cache` on CachetClient: `app.cache` and `req.cache` read and write a Cachet node or cluster,
/// shared by every instance of the app.
///
/// ```swift
/// app.caches.use(.cachet(.init(nodes: [.init(host: "127.0.0.1", port: 7420)])))
/// try await req.cache.set("greeting", to: "hello", expiresIn: .minutes(5))
/// let greeting = try await req.cache.get("greeting", as: String.self)
/// ```
///
/// Values are stored as the client's typed calls store them (its ``CachetClient/coder``, JSON by
/// default; `String` and `[UInt8]` as their bytes), so another consumer of the cluster reads them with
/// `client.get(key, as:)`. An expiry becomes the entry's TTL in the cache; an expiry of zero seconds or
/// less, and a nil value, delete the key. A stored value that is not of the type asked for is a miss,
/// logged as a warning (as Vapor's memory cache answers nil for another type); a cluster that fails is an
/// error.
public struct CachetCache: Cache, Sendable {
    /// The client every request goes through.
    public let client: CachetClient
    /// The event loop the futures complete on (the request's, for `req.cache`).
    public let eventLoop: any EventLoop
    /// Put before every key.
    public let keyPrefix: String
    /// The context the client's spans are children of: the request's for `req.cache` (its span, when
    /// the app traces requests), else the caller's task's.
    public let serviceContext: ServiceContext?

    /// A cache over `client`.
    /// - Parameters:
    ///   - client: the client.
    ///   - eventLoop: the event loop the futures complete on.
    ///   - keyPrefix: put before every key; empty by default.
    ///   - serviceContext: the parent of the client's spans; nil for the calling task's.
    public init(
        client: CachetClient,
        eventLoop: any EventLoop,
        keyPrefix: String = "",
        serviceContext: ServiceContext? = nil
    ) {
        self.client = client
        self.eventLoop = eventLoop
        self.keyPrefix = keyPrefix
        self.serviceContext = serviceContext
    }

    /// The value under `key` as a `T`, nil on a miss.
    public func get<T: Decodable>(_ key: String, as type: T.Type) -> EventLoopFuture<T?> {
        let client = self.client
        let name = keyPrefix + key
        let read = TypedRead(
            client: client,
            name: name,
            context: serviceContext ?? ServiceContext.current,
            promise: eventLoop.makePromise(of: T?.self)
        )
        let pending: PendingRead = read
        Task { await pending.run() }
        return read.promise.futureResult
    }

    /// Stores `value` under `key` with no expiry; nil deletes the key.
    public func set<T: Encodable>(_ key: String, to value: T?) -> EventLoopFuture<Void> {
        set(key, to: value, expiresIn: nil)
    }

    /// Stores `value` under `key` for `expirationTime` (nil for no expiry); nil, or an expiry of zero
    /// seconds or less, deletes the key.
    public func set<T: Encodable>(
        _ key: String,
        to value: T?,
        expiresIn expirationTime: CacheExpirationTime?
    ) -> EventLoopFuture<Void> {
        let client = self.client
        let name = keyPrefix + key
        let promise = eventLoop.makePromise(of: Void.self)
        let context = serviceContext ?? ServiceContext.current
        guard let value, (expirationTime?.seconds ?? 1) > 0 else {
            promise.completeWithTask { _ = try await within(context) { try await client.delete(name) } }
            return promise.futureResult
        }
        let bytes: [UInt8]
        do {
            bytes = try client.encoded(value, for: name)
        } catch {
            return eventLoop.makeFailedFuture(error)
        }
        let ttl = expirationTime.map { Duration.seconds($0.seconds) }
        promise.completeWithTask { try await within(context) { try await client.put(name, value: bytes, ttl: ttl) } }
        return promise.futureResult
    }

    /// The same cache completing on the request's event loop.
    public func `for`(_ request: Request) -> Self {
        CachetCache(
            client: client,
            eventLoop: request.eventLoop,
            keyPrefix: keyPrefix,
            serviceContext: request.serviceContext
        )
    }
}

/// A GET for ``CachetCache/get(_:as:)``, run by a task and finished on the event loop.
///
/// `Cache` accepts any `Decodable`, not only sendable ones, and a closure that crosses into a task or
/// onto the loop may capture only sendable metatypes. So the closures hold this non-generic base class,
/// and the typed work happens in ``TypedRead``'s methods: the bytes are read in the task, then decoded and
/// handed to the promise on its event loop (where a non-sendable value may complete it).
class PendingRead: @unchecked Sendable {
    /// Reads, then finishes on the loop.
    func run() async {}
    /// Decodes and completes the promise; on the promise's event loop.
    func finish(_ bytes: Result<[UInt8]?, any Error>) {}
}

/// ``PendingRead`` of a `T`: its fields are set once, before the task starts.
final class TypedRead<T: Decodable>: PendingRead, @unchecked Sendable {
    let client: CachetClient
    let name: String
    let context: ServiceContext?
    let promise: EventLoopPromise<T?>

    init(client: CachetClient, name: String, context: ServiceContext?, promise: EventLoopPromise<T?>) {
        self.client = client
        self.name = name
        self.context = context
        self.promise = promise
    }

    override func run() async {
        let bytes: Result<[UInt8]?, any Error>
        do {
            bytes = .success(try await within(context) { try await client.get(name) })
        } catch {
            bytes = .failure(error)
        }
        let pending: PendingRead = self
        promise.futureResult.eventLoop.execute { pending.finish(bytes) }
    }

    override func finish(_ bytes: Result<[UInt8]?, any Error>) {
        do {
            guard let stored = try bytes.get() else { return self.promise.assumeIsolated().succeed(nil) }
            let value: T?
            do {
                value = try client.decoded(T.self, from: stored, for: name)
            } catch {
                // Written by another type or coder: a miss for this caller, which loads the value again.
                cacheLogger.warning(
                    "a cached value could not be read as the type asked for: answered as a miss",
                    metadata: ["cachet.key": "\(name)", "type": "\(T.self)", "error.message": "\(error)"]
                )
                value = nil
            }
            self.promise.assumeIsolated().succeed(value)
        } catch {
            self.promise.fail(error)
        }
    }
}

/// Runs `body` with `context` as the task's service context (the parent of the client's spans), or as it is.
/// Where ``CachetCache`` reports a value it could not read.
let cacheLogger = Logger(label: "cachet.vapor.cache")

func within<Result: Sendable>(
    _ context: ServiceContext?,
    _ body: () async throws -> Result
) async throws -> Result {
    guard let context else { return try await body() }
    return try await ServiceContext.withValue(context) { try await body() }
}
