import CachetClient
import CachetVapor
import Vapor

// A Vapor app whose slow handler's result is cached in Cachet for 30 s, and whose sessions live there:
//   swift run --package-path Examples/VaporApp CachetVaporExample
//   curl http://127.0.0.1:8080/report/7     # 1 s the first time, then from the cache
//   curl http://127.0.0.1:8080/visits       # counts your visits in a session kept in Cachet
// CACHET_NODES lists the nodes (HOST:PORT, comma-separated; 127.0.0.1:7420 by default); PORT the app's port.
struct Report: Content {
    var id: Int
    var total: Int
    var computedAt: Date
}

let nodes = (Environment.get("CACHET_NODES") ?? "127.0.0.1:7420").split(separator: ",").map { address in
    guard let node = CachetClient.Node(address: String(address)) else {
        fatalError("CACHET_NODES: not an address: \(address)")
    }
    return node
}

var environment = try Environment.detect()
try LoggingSystem.bootstrap(from: &environment)
let app = try await Application.make(environment)
app.http.server.configuration.hostname = "127.0.0.1"
app.http.server.configuration.port = Environment.get("PORT").flatMap(Int.init) ?? 8080
app.caches.use(.cachet(.init(nodes: nodes), keyPrefix: "example:"))
app.sessions.use(.cachet)
app.middleware.use(app.sessions.middleware)

app.get("report", ":id") { request async throws -> Report in
    let id = try request.parameters.require("id", as: Int.self)
    if let cached = try await request.cache.get("report:\(id)", as: Report.self) { return cached }
    try await Task.sleep(for: .seconds(1))  // the slow part: a query, a remote call
    let report = Report(id: id, total: (1...id * 1000).reduce(0, +), computedAt: Date())
    try await request.cache.set("report:\(id)", to: report, expiresIn: .seconds(30))
    return report
}

app.get("visits") { request -> String in
    let visits = (Int(request.session.data["visits"] ?? "") ?? 0) + 1
    request.session.data["visits"] = "\(visits)"
    return "visit \(visits)\n"
}

do {
    try await app.execute()
} catch {
    app.logger.report(error: error)
}
try await app.asyncShutdown()
