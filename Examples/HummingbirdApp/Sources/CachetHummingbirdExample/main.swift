import CachetClient
import CachetHummingbird
import Foundation
import Hummingbird

// A Hummingbird app whose slow handler's result is cached in Cachet for 30 s through the persist driver:
//   swift run --package-path Examples/HummingbirdApp CachetHummingbirdExample
//   curl http://127.0.0.1:8081/report/7     # 1 s the first time, then from the cache
// CACHET_NODES lists the nodes (HOST:PORT, comma-separated; 127.0.0.1:7420 by default); PORT the app's port.
struct Report: ResponseCodable {
    var id: Int
    var total: Int
    var computedAt: Date
}

let environment = ProcessInfo.processInfo.environment
let nodes = (environment["CACHET_NODES"] ?? "127.0.0.1:7420").split(separator: ",").map { address in
    guard let node = CachetClient.Node(address: String(address)) else {
        fatalError("CACHET_NODES: not an address: \(address)")
    }
    return node
}
let persist = try CachetPersistDriver(configuration: .init(nodes: nodes), keyPrefix: "example:")

let router = Router()
router.get("report/:id") { _, context -> Report in
    let id = try context.parameters.require("id", as: Int.self)
    if let cached = try await persist.get(key: "report:\(id)", as: Report.self) { return cached }
    try await Task.sleep(for: .seconds(1))  // the slow part: a query, a remote call
    let report = Report(id: id, total: (1...id * 1000).reduce(0, +), computedAt: Date())
    try await persist.set(key: "report:\(id)", value: report, expires: .seconds(30))
    return report
}

var app = Application(
    router: router,
    configuration: .init(address: .hostname("127.0.0.1", port: environment["PORT"].flatMap(Int.init) ?? 8081))
)
app.addServices(persist)  // the client shuts down with the app
try await app.runService()
