import CachetClient
import Foundation

// Prints every change of keys under "user:" on the node given as HOST:PORT (default 127.0.0.1:7420), with
// the values decoded as User, for SECONDS seconds (default 30), while this program also writes a few:
//   swift run --package-path Examples CachetWatchExample 127.0.0.1:7420 10
struct User: Codable, Sendable {
    var name: String
    var visits: Int
}

let arguments = CommandLine.arguments.dropFirst()
let address = arguments.first ?? "127.0.0.1:7420"
let seconds = Int(arguments.dropFirst().first ?? "") ?? 30
guard let node = CachetClient.Node(address: address) else {
    print("not an address: \(address) (give HOST:PORT)")
    exit(2)
}

do {
    let client = try CachetClient(configuration: .init(nodes: [node]))
    let watching = Task {
        for try await change in client.changes(prefix: "user:", values: true) {
            switch change.kind {
            case .put: print("\(change.keyString) is now \(try change.value(as: User.self).map { "\($0)" } ?? "?")")
            case .gap: print("changes were missed on \(change.node): reload what you hold")
            default: print("\(change.keyString): \(change.kind)")
            }
        }
    }
    try await Task.sleep(for: .milliseconds(300))
    for visit in 1...3 {
        try await client.put("user:42", value: User(name: "Ada", visits: visit), ttl: .seconds(60))
    }
    try await client.delete("user:42")
    try await Task.sleep(for: .seconds(seconds))
    watching.cancel()
    await client.shutdown()
} catch {
    print("cachet: \(error)")
}
