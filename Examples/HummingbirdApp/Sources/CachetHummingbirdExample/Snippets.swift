// swift-format-ignore-file
// (The snippets are the documents' words, spacing included.)

import CachetClient
import CachetHummingbird
import Hummingbird
import HummingbirdAuth

// The Hummingbird snippets of docs/frameworks.md, word for word inside functions, so that
// they compile with every build of this package; the core's SnippetTests fails when one is not found here
// line for line. Never called.

/// What the snippet's sessions hold.
struct SnippetSession: Codable, Sendable {
    var name: String
}

/// docs/frameworks.md, "Hummingbird".
func frameworksHummingbird(
    _ router: Router<BasicSessionRequestContext<SnippetSession, SnippetSession>>,
    configuration: CachetClient.Configuration
) throws -> some ApplicationProtocol {
    let persist = try CachetPersistDriver(configuration: configuration, keyPrefix: "myapp:")
    router.add(middleware: SessionMiddleware(storage: persist))
    var app = Application(router: router)
    app.addServices(persist)     // a Service: shuts its client down with the app
    return app
}
