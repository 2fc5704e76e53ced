import CachetClient
import CachetTestSupport
import CachetVapor
import InMemoryTracing
import Synchronization
import Testing
import Tracing
import Vapor
import VaporTesting

/// The Vapor drivers against a real `cachet-node`, through real HTTP requests to the app (Vapor's own
/// test helpers, on an ephemeral port): the cache (`req.cache`, expiry, delete, shared with other
/// consumers), sessions shared by two instances of an app, and the client shut down with the app.
@Suite("CachetVapor")
struct CachetVaporTests {
    /// The client configuration for `node`.
    static func configuration(_ node: NodeProcess) -> CachetClient.Configuration {
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: node.port)])
        configuration.requestTimeout = .seconds(5)
        return configuration
    }

    /// Counts a handler's calls.
    final class Counter: Sendable {
        private let value = Mutex(0)
        func next() -> Int {
            value.withLock {
                $0 += 1; return $0
            }
        }
        var count: Int { value.withLock { $0 } }
    }

    struct Report: Content, Equatable {
        var id: Int
        var computed: Int
    }

    @Test func aSlowHandlersResultIsCachedAndExpires() async throws {
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        let computations = Counter()
        try await withApp { app in
            app.caches.use(.cachet(Self.configuration(node), keyPrefix: "reports:"))
            app.get("report", ":id") { request async throws -> Report in
                let id = try request.parameters.require("id", as: Int.self)
                if let cached = try await request.cache.get("\(id)", as: Report.self) { return cached }
                let report = Report(id: id, computed: computations.next())
                try await request.cache.set("\(id)", to: report, expiresIn: .seconds(1))
                return report
            }
            app.post("claim", ":name") { request async throws -> String in
                let name = try request.parameters.require("name")
                return try await request.cachet.add("claims:\(name)", value: "taken") ? "yours" : "taken"
            }
            let tester = try app.testing(method: .running(hostname: "127.0.0.1", port: 0))
            for _ in 0..<3 {
                try await tester.test(.GET, "report/7") { response in
                    #expect(response.status == .ok)
                    let report = try response.content.decode(Report.self)
                    #expect(report == Report(id: 7, computed: 1))
                }
            }
            #expect(computations.count == 1, "served from the cache after the first request")
            // In Cachet under the prefix, readable by any consumer of the cluster.
            #expect(try await app.cachet.client.get("reports:7", as: Report.self) == Report(id: 7, computed: 1))
            // The expiry is the entry's TTL.
            try await Task.sleep(for: .milliseconds(2200))
            try await tester.test(.GET, "report/7") { response in
                let report = try response.content.decode(Report.self)
                #expect(report.computed == 2)
            }

            // app.cache directly: nil and a zero expiry delete.
            try await app.cache.set("other", to: "text")
            #expect(try await app.cache.get("other", as: String.self) == "text")
            #expect(try await app.cachet.client.getString("reports:other") == "text", "a String is its bytes")
            try await app.cache.set("other", to: String?.none)
            #expect(try await app.cache.get("other", as: String.self) == nil)
            try await app.cache.set("other", to: "again", expiresIn: .seconds(0))
            #expect(try await app.cache.get("other", as: String.self) == nil)
            // The client itself, from a request: what the cache does not offer, such as add.
            for expected in ["yours", "taken"] {
                try await tester.test(.POST, "claim/ada") { response in #expect(response.body.string == expected) }
            }
            // A value of another type is a miss (logged), never an error the app answers 500 for; the page
            // is computed again and replaces it.
            try await app.cache.set("7", to: "not a report")
            #expect(try await app.cache.get("7", as: Report.self) == nil)
            try await tester.test(.GET, "report/7") { response in
                #expect(response.status == .ok)
                let report = try response.content.decode(Report.self)
                #expect(report.computed == 3)
            }
        }
        _ = await node.terminate()
    }

    /// Two instances of an app on one node: a session started on one is read and changed on the other,
    /// through real HTTP requests with its cookie.
    @Test func sessionsStartedOnOneInstanceOfAnAppAreReadByAnother() async throws {
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        @Sendable func configure(_ app: Application) throws {
            try app.cachet.use(Self.configuration(node))
            app.sessions.use(.cachet)
            app.middleware.use(app.sessions.middleware)
            app.post("login", ":name") { request -> String in
                request.session.data["name"] = try request.parameters.require("name")
                request.session.data["visits"] = "0"
                return "hello"
            }
            app.get("visit") { request -> String in
                guard let name = request.session.data["name"] else { throw Abort(.unauthorized) }
                let visits = (Int(request.session.data["visits"] ?? "") ?? 0) + 1
                request.session.data["visits"] = "\(visits)"
                return "\(name) \(visits)"
            }
        }
        let cookie = try await withApp { app in
            try configure(app)
            var cookie = ""
            try await app.testing(method: .running(hostname: "127.0.0.1", port: 0)).test(.POST, "login/ada") {
                response in
                #expect(response.status == .ok)
                cookie = response.headers.first(name: .setCookie)?.split(separator: ";").first.map(String.init) ?? ""
            }
            return cookie
        }
        #expect(cookie.hasPrefix("vapor-session="), "\(cookie)")
        let id = String(cookie.dropFirst("vapor-session=".count))
        try await withApp { app in
            try configure(app)
            let tester = try app.testing(method: .running(hostname: "127.0.0.1", port: 0))
            for expected in 1...3 {
                try await tester.test(.GET, "visit", headers: ["Cookie": cookie]) { response in
                    #expect(response.status == .ok)
                    #expect(response.body.string == "ada \(expected)")
                }
            }
            try await tester.test(.GET, "visit") { response in #expect(response.status == .unauthorized) }
            // Stored in Cachet under the sessions' prefix.
            let stored = try #require(try await app.cachet.client.get("vapor-session:\(id)", as: [String: String].self))
            #expect(stored["visits"] == "3")
        }
        _ = await node.terminate()
    }

    /// The app's client is shut down with the app.
    @Test func theClientShutsDownWithTheApp() async throws {
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        let client = try await withApp { app in
            app.caches.use(.cachet(Self.configuration(node)))
            try await app.cache.set("k", to: "v")
            return app.cachet.client
        }
        do {
            _ = try await client.get("k")
            Issue.record("the client still answered after the app shut down")
        } catch {
            #expect(error.code == .shutdown)
        }
        _ = await node.terminate()
    }

    /// With Vapor's `TracingMiddleware`, the client's spans of `req.cache` and of the sessions are children
    /// of the request's span.
    @Test func theClientsSpansAreChildrenOfTheRequestsSpan() async throws {
        _ = ProcessTracer.shared  // bootstrapped before the clients are made
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        try await withApp { app in
            app.middleware.use(TracingMiddleware())
            app.caches.use(.cachet(Self.configuration(node), keyPrefix: "traced:"))
            app.sessions.use(.cachet)
            app.middleware.use(app.sessions.middleware)
            app.get("traced", ":id") { request async throws -> String in
                let id = try request.parameters.require("id")
                request.session.data["seen"] = id
                if let cached = try await request.cache.get(id, as: String.self) { return cached }
                try await request.cache.set(id, to: "value \(id)")
                return "value \(id)"
            }
            try await app.testing(method: .running(hostname: "127.0.0.1", port: 0)).test(.GET, "traced/trace-me") {
                response in
                #expect(response.status == .ok)
            }
        }
        _ = await node.terminate()
        let (server, children, spans) = try #require(ProcessTracer.requestSpans(path: "/traced/trace-me"))
        // The cache's GET (a miss) and PUT, and the new session's GET-with-lease and PUT.
        #expect(
            children.map(\.operationName).sorted() == ["GET", "GET", "PUT", "PUT"],
            "\(spans.map(\.operationName))"
        )
        #expect(children.allSatisfy { $0.traceID == server.traceID })
    }
}
