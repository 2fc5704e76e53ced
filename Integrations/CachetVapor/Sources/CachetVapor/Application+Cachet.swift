public import CachetClient
public import Vapor

extension Application {
    /// The app's Cachet client: ``Cachet/use(_:)`` makes it, the cache and sessions drivers use it, and the
    /// app shuts it down when it shuts down.
    public var cachet: Cachet { Cachet(application: self) }

    /// The app's Cachet client and its configuration.
    public struct Cachet: Sendable {
        /// The application.
        public let application: Application

        /// The storage key of the app's client.
        struct Key: StorageKey {
            typealias Value = CachetClient
        }

        /// Makes the app's client (replacing one made before, which is shut down) and has the app shut it
        /// down when it shuts down.
        /// - Parameter configuration: the nodes, timeouts, TLS and credentials.
        /// - Throws: ``CachetClientError`` `invalidConfiguration`.
        public func use(_ configuration: CachetClient.Configuration) throws {
            let client = try CachetClient(configuration: configuration)
            let previous = application.storage[Key.self]
            application.storage[Key.self] = client
            if let previous {
                Task { await previous.shutdown() }
            } else {
                application.lifecycle.use(Shutdown())
            }
        }

        /// The app's client.
        ///
        /// Crashes with a message saying what to do when none was made: call ``use(_:)`` (or
        /// `app.caches.use(.cachet(configuration))`) while configuring the app.
        public var client: CachetClient {
            guard let client = application.storage[Key.self] else {
                fatalError(
                    "No Cachet client configured: call app.cachet.use(configuration) or "
                        + "app.caches.use(.cachet(configuration)) while configuring the app"
                )
            }
            return client
        }

        /// Shuts the app's client down with the app: requests in flight are answered, new ones fail.
        struct Shutdown: LifecycleHandler {
            func shutdownAsync(_ application: Application) async {
                await application.storage[Key.self]?.shutdown()
            }
        }
    }
}

extension Application.Caches.Provider {
    /// Vapor's cache on the app's Cachet client (made with `app.cachet.use(configuration)` first).
    public static var cachet: Self { cachet(keyPrefix: "") }

    /// Vapor's cache on the app's Cachet client, every key under `keyPrefix`.
    /// - Parameter keyPrefix: put before every key, so that apps sharing a cluster keep apart.
    public static func cachet(keyPrefix: String) -> Self {
        .init { application in useCachet(on: application, keyPrefix: keyPrefix) }
    }

    /// Makes `application`'s cache a ``CachetCache`` on its Cachet client.
    private static func useCachet(on application: Application, keyPrefix: String) {
        application.caches.use { application in
            CachetCache(
                client: application.cachet.client,
                eventLoop: application.eventLoopGroup.any(),
                keyPrefix: keyPrefix
            )
        }
    }

    /// Vapor's cache on a Cachet client made from `configuration`, which becomes the app's client.
    ///
    /// ```swift
    /// app.caches.use(.cachet(.init(nodes: [.init(host: "127.0.0.1", port: 7420)])))
    /// ```
    /// Crashes with the configuration's error when it cannot be used (no nodes, a timeout out of range);
    /// `try app.cachet.use(configuration)` then `app.caches.use(.cachet)` throws it instead.
    /// - Parameters:
    ///   - configuration: the client's nodes, timeouts, TLS and credentials.
    ///   - keyPrefix: put before every key.
    public static func cachet(_ configuration: CachetClient.Configuration, keyPrefix: String = "") -> Self {
        .init { application in
            do {
                try application.cachet.use(configuration)
            } catch {
                fatalError("Cachet: \(error)")
            }
            useCachet(on: application, keyPrefix: keyPrefix)
        }
    }
}

extension Application.Sessions.Provider {
    /// Vapor's sessions in Cachet, on the app's Cachet client (made with `app.cachet.use(configuration)`
    /// or `app.caches.use(.cachet(configuration))`), each kept 7 days after its last change, as Vapor's
    /// session cookie.
    public static var cachet: Self { cachet(ttl: CachetSessions.defaultTTL) }

    /// Vapor's sessions in Cachet, each kept `ttl` after its last change.
    /// - Parameters:
    ///   - ttl: how long a session lives after its last change; nil for as long as the cache keeps it.
    ///   - keyPrefix: put before every session id; `vapor-session:` by default.
    public static func cachet(ttl: Duration?, keyPrefix: String = CachetSessions.defaultKeyPrefix) -> Self {
        .init { application in
            application.sessions.use { application in
                CachetSessions(client: application.cachet.client, ttl: ttl, keyPrefix: keyPrefix)
            }
        }
    }
}

extension Request {
    /// The app's Cachet client (``Application/Cachet/client``), for what `req.cache` does not offer: typed
    /// reads with a loader, `add`, changes, batches.
    ///
    /// Its spans are children of the calling task's service context; to make them children of the
    /// request's span, call it inside `ServiceContext.withValue(req.serviceContext) { ... }` (`req.cache`
    /// and the sessions driver do that themselves).
    public var cachet: CachetClient { application.cachet.client }
}
