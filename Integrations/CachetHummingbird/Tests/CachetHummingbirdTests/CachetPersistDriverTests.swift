import CachetClient
import CachetHummingbird
import CachetTestSupport
import Foundation
import Hummingbird
import HummingbirdAuth
import HummingbirdTesting
import InMemoryTracing
import Testing
import Tracing

/// `CachetPersistDriver` against a real `cachet-node`: the persist driver's contract (create that fails on
/// an existing key, set that keeps an expiry, get, getWithTTL, remove, expiry), then Hummingbird's own
/// sessions through two instances of an app sharing one node, with real HTTP requests, and the driver run
/// as a service of the app.
@Suite("CachetPersistDriver")
struct CachetPersistDriverTests {
    struct User: Codable, Sendable, Equatable {
        var name: String
        var visits: Int
    }

    /// A node, and a driver over a client of its own with a short timeout.
    static func driver(on node: NodeProcess, keyPrefix: String = "") throws -> CachetPersistDriver {
        var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: node.port)])
        configuration.requestTimeout = .seconds(5)
        return try CachetPersistDriver(configuration: configuration, keyPrefix: keyPrefix)
    }

    @Test func createSetGetRemoveAndExpiry() async throws {
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        let persist = try Self.driver(on: node, keyPrefix: "app1:")
        let ada = User(name: "Ada", visits: 1)

        try await persist.create(key: "u1", value: ada, expires: nil)
        #expect(try await persist.get(key: "u1", as: User.self) == ada)
        await #expect(throws: PersistError.duplicate) {
            try await persist.create(key: "u1", value: User(name: "other", visits: 0), expires: nil)
        }
        #expect(try await persist.get(key: "u1", as: User.self) == ada, "a failed create changes nothing")
        // Under the key prefix, in Cachet itself.
        #expect(try await persist.client.get("app1:u1") != nil)
        #expect(try await persist.client.get("u1") == nil)

        // A value that is not the type asked for.
        await #expect(throws: PersistError.invalidConversion) { try await persist.get(key: "u1", as: [Int].self) }

        // set replaces; remove removes; a missing key is nil.
        try await persist.set(key: "u1", value: User(name: "Ada", visits: 2), expires: nil)
        #expect(try await persist.get(key: "u1", as: User.self)?.visits == 2)
        #expect(try await persist.getWithTTL(key: "u1", as: User.self)?.ttl == nil)
        try await persist.remove(key: "u1")
        #expect(try await persist.get(key: "u1", as: User.self) == nil)
        try await persist.create(key: "u1", value: ada, expires: nil)

        // An expiry: the time left is told, set without one keeps it, and the value is gone after it.
        try await persist.set(key: "short", value: ada, expires: .seconds(2))
        let first = try #require(try await persist.getWithTTL(key: "short", as: User.self))
        // The node's TTL left, in whole seconds.
        #expect(first.ttl.map { $0 >= .seconds(1) && $0 <= .seconds(2) } == true, "\(String(describing: first.ttl))")
        try await persist.set(key: "short", value: User(name: "Ada", visits: 3), expires: nil)
        let kept = try #require(try await persist.getWithTTL(key: "short", as: User.self))
        #expect(kept.object.visits == 3)
        #expect(kept.ttl.map { $0 > .zero && $0 <= .seconds(2) } == true, "kept: \(String(describing: kept.ttl))")
        try await Task.sleep(for: .milliseconds(2200))
        #expect(try await persist.get(key: "short", as: User.self) == nil)
        // Expired, so absent: create succeeds once the node has let it go (TTLs are whole seconds there).
        try await Task.sleep(for: .milliseconds(1000))
        try await persist.create(key: "short", value: ada, expires: .seconds(60))
        try await persist.shutdown()
        _ = await node.terminate()
    }

    /// One value format for every driver and the client's typed calls: what an app on the Vapor driver (or
    /// any `client.put(key, value:)`) stored, this driver reads, with the node's TTL, and the reverse.
    @Test func valuesAreTheClientsTypedValuesSoOtherDriversShareThem() async throws {
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        let persist = try Self.driver(on: node)
        let client = persist.client
        let ada = User(name: "Ada", visits: 4)

        try await client.put("example:report:7", value: ada, ttl: .seconds(30))
        let read = try #require(try await persist.getWithTTL(key: "example:report:7", as: User.self))
        #expect(read.object == ada)
        #expect(read.ttl.map { $0 > .seconds(20) && $0 <= .seconds(30) } == true, "\(String(describing: read.ttl))")

        try await persist.set(key: "example:report:9", value: ada, expires: .seconds(30))
        #expect(try await client.get("example:report:9", as: User.self) == ada)
        try await persist.create(key: "example:report:10", value: ada, expires: nil)
        #expect(try await client.get("example:report:10", as: User.self) == ada)
        try await persist.shutdown()
        _ = await node.terminate()
    }

    @Test func ofManyConcurrentCreatesOfOneKeyOneSucceeds() async throws {
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        let drivers = try (0..<3).map { _ in try Self.driver(on: node) }
        let created = await withTaskGroup(of: Bool.self) { group in
            for (index, persist) in drivers.enumerated() {
                for task in 0..<10 {
                    group.addTask {
                        do {
                            try await persist.create(
                                key: "once",
                                value: User(name: "\(index)", visits: task),
                                expires: nil
                            )
                            return true
                        } catch {
                            return false
                        }
                    }
                }
            }
            return await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
        }
        #expect(created == 1)
        for persist in drivers { try await persist.shutdown() }
        _ = await node.terminate()
    }

    typealias Context = BasicSessionRequestContext<User, User>

    /// An app that keeps its sessions in Cachet: POST /login/NAME starts a session, GET /visit counts the
    /// session's visits.
    static func app(persist: CachetPersistDriver) -> some ApplicationProtocol {
        let router = Router(context: Context.self)
        router.add(middleware: SessionMiddleware(storage: persist))
        router.post("login/:name") { _, context -> String in
            let name = try context.parameters.require("name")
            context.sessions.createSession(User(name: name, visits: 0), expiresIn: .seconds(600))
            return "hello \(name)"
        }
        router.get("visit") { _, context -> String in
            guard var user = context.sessions.session else { throw HTTPError(.unauthorized) }
            user.visits += 1
            _ = context.sessions.updateSession(user)
            return "\(user.name) \(user.visits)"
        }
        var app = Application(router: router)
        app.addServices(persist)
        return app
    }

    /// Two instances of the app (each its own driver and client) on one node: a session started on one is
    /// read and updated on the other, through real HTTP requests, and its expiry is kept by the updates.
    @Test func sessionsStartedOnOneInstanceOfAnAppAreReadByAnother() async throws {
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        let first = try Self.driver(on: node)
        let second = try Self.driver(on: node)
        let cookie = try await Self.app(persist: first).test(.live) { client in
            try await client.execute(uri: "/login/ada", method: .post) { response in
                #expect(response.status == .ok)
                return try #require(response.headers[.setCookie]?.split(separator: ";").first.map(String.init))
            }
        }
        #expect(cookie.hasPrefix("SESSION_ID="))
        try await Self.app(persist: second).test(.live) { client in
            for expected in 1...3 {
                try await client.execute(uri: "/visit", method: .get, headers: [.cookie: cookie]) { response in
                    #expect(response.status == .ok)
                    #expect(String(buffer: response.body) == "ada \(expected)")
                }
            }
            try await client.execute(uri: "/visit", method: .get) { response in
                #expect(response.status == .unauthorized, "no cookie, no session")
            }
        }
        // Stored in Cachet under Hummingbird's prefix, with the expiry the login gave it, kept by the updates.
        let id = String(cookie.dropFirst("SESSION_ID=".count))
        let reader = try Self.driver(on: node)
        let stored = try #require(try await reader.getWithTTL(key: "hbs.\(id)", as: User.self))
        #expect(stored.object.visits == 3)
        #expect(
            stored.ttl.map { $0 > .seconds(500) && $0 <= .seconds(600) } == true,
            "\(String(describing: stored.ttl))"
        )
        try await reader.shutdown()
        // The apps ran their drivers as services: each shut its client down with the app.
        await #expect(throws: CachetClientError.self) { _ = try await first.client.get("anything") }
        await #expect(throws: CachetClientError.self) { _ = try await second.client.get("anything") }
        _ = await node.terminate()
    }

    /// With Hummingbird's `TracingMiddleware`, the driver's requests are spans under the request's span:
    /// Hummingbird runs the handler and the middleware after it inside that span's context.
    @Test func theDriversSpansAreChildrenOfTheRequestsSpan() async throws {
        _ = ProcessTracer.shared  // bootstrapped before the clients are made
        let node = try await NodeProcess.start(arguments: ["--disk-limit", "0"])
        let persist = try Self.driver(on: node, keyPrefix: "traced:")
        let router = Router(context: Context.self)
        router.add(middleware: TracingMiddleware())
        router.add(middleware: SessionMiddleware(storage: persist))
        router.get("traced/:id") { _, context -> String in
            let id = try context.parameters.require("id")
            context.sessions.createSession(User(name: id, visits: 1), expiresIn: .seconds(60))
            if let cached = try await persist.get(key: id, as: String.self) { return cached }
            try await persist.set(key: id, value: "value \(id)", expires: .seconds(60))
            return "value \(id)"
        }
        var app = Application(router: router)
        app.addServices(persist)
        try await app.test(.live) { client in
            try await client.execute(uri: "/traced/trace-me", method: .get) { response in
                #expect(response.status == .ok)
            }
        }
        _ = await node.terminate()
        let (server, children, spans) = try #require(ProcessTracer.requestSpans(path: "/traced/trace-me"))
        // The handler's GET (a miss) and PUT, and the new session's PUT.
        #expect(children.map(\.operationName).sorted() == ["GET", "PUT", "PUT"], "\(spans.map(\.operationName))")
        #expect(children.allSatisfy { $0.traceID == server.traceID })
    }
}
