// swift-format-ignore-file
// (The snippets are the documents' words, spacing included.)

import CachetVapor
import Vapor

// README.md's Vapor snippet, word for word inside a function, so that it compiles with every build of this
// package; the core's SnippetTests fails when it is not found here line for line. Never called.

/// What the snippet's slow handler makes.
struct SnippetReport: Content {
    var total: Int
}

/// README.md, "Use Cachet from Vapor and Hummingbird".
func readmeVapor(_ app: Application) {
    typealias Report = SnippetReport
    @Sendable func makeReport(_ id: Int) async throws -> Report { Report(total: id) }
    app.caches.use(.cachet(.init(nodes: [.init(host: "127.0.0.1", port: 7420)])))
    app.sessions.use(.cachet)                      // 7 days after the last change, as Vapor's cookie
    app.middleware.use(app.sessions.middleware)
    app.get("report", ":id") { req async throws -> Report in
        let id = try req.parameters.require("id", as: Int.self)
        if let cached = try await req.cache.get("report:\(id)", as: Report.self) { return cached }
        let report = try await makeReport(id)      // slow
        try await req.cache.set("report:\(id)", to: report, expiresIn: .seconds(30))
        return report
    }
}
