import CachetClient
import Foundation

// Stores, reads and deletes a key on the node given as HOST:PORT (default 127.0.0.1:7420):
//   swift run --package-path Examples CachetClientExample 127.0.0.1:7420
let address = CommandLine.arguments.dropFirst().first ?? "127.0.0.1:7420"
guard let node = CachetClient.Node(address: address) else {
    print("not an address: \(address) (give HOST:PORT)")
    exit(2)
}

do {
    let client = try CachetClient(configuration: .init(nodes: [node]))
    let bytes: [UInt8] = Array("hello from Swift".utf8)
    try await client.put("user:42", value: bytes, ttl: .seconds(60))
    let value: [UInt8]? = try await client.get("user:42")
    let removed: Bool = try await client.delete("user:42")
    print("read \(value.map { String(decoding: $0, as: UTF8.self) } ?? "nothing"), removed: \(removed)")
    for node in try await client.stats() {
        print("\(node.node): \(node.items ?? 0) items, version \(node.version ?? "?")")
    }
    await client.shutdown()
} catch {
    print("cachet: \(error)")
}
