import CachetCluster
import CachetTestSupport
import Foundation
import Testing

@testable import CachetClient

/// The client routes exactly as `Protocol/RING.md` says: `Protocol/vectors/ring.json` gives every key's
/// owner and preference list, and a down owner's keys go to the next entry of the list.
@Suite("CachetClient routing")
struct ClientRoutingTests {
    struct File: Decodable {
        var rings: [Ring]
    }

    struct Ring: Decodable {
        var name: String
        var members: [String]
        var virtual_nodes_per_member: Int
        var keys: [Key]
    }

    struct Key: Decodable {
        var key_hex: String
        var owner: String
        var preference: [String]
    }

    static let rings: [Ring] = {
        let path = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Protocol/vectors/ring.json").path
        do {
            return try JSONDecoder().decode(File.self, from: Data(contentsOf: URL(fileURLWithPath: path))).rings
        } catch {
            preconditionFailure("\(path): \(error)")
        }
    }()

    static func bytes(hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count, by: 2).map {
            UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)!
        }
    }

    /// The configuration of a vector ring: one node per member, named by the member.
    static func configuration(_ ring: Ring) -> CachetClient.Configuration {
        var configuration = CachetClient.Configuration(
            nodes: ring.members.enumerated().map { CachetClient.Node(host: "127.0.0.1", port: 20000 + $0, id: $1) }
        )
        configuration.virtualNodesPerMember = ring.virtual_nodes_per_member
        return configuration
    }

    @Test("every key's owner is the vector's", arguments: rings.indices)
    func owners(ring index: Int) async throws {
        let ring = Self.rings[index]
        let client = try CachetClient(configuration: Self.configuration(ring))
        for key in ring.keys {
            #expect(client.owner(of: Self.bytes(hex: key.key_hex)).id == key.owner, "key \(key.key_hex)")
        }
        await client.shutdown()
    }

    @Test("with the first k nodes of a key's preference list down, it goes to entry k + 1", arguments: rings.indices)
    func failover(ring index: Int) throws {
        let ring = Self.rings[index]
        let configuration = Self.configuration(ring)
        let router = try CachetClientRouter(
            nodes: configuration.nodes,
            virtualNodesPerMember: configuration.virtualNodesPerMember
        )
        for key in ring.keys {
            let bytes = Self.bytes(hex: key.key_hex)
            for down in 0..<key.preference.count {
                let downIDs = Set(key.preference.prefix(down))
                let routed = bytes.withUnsafeBytes { buffer in
                    router.route(buffer, failover: true) { !downIDs.contains(configuration.nodes[$0].id) }
                }
                #expect(routed.map { configuration.nodes[$0].id } == key.preference[down])
            }
            let withoutFailover = bytes.withUnsafeBytes { buffer in
                router.route(buffer, failover: false) { configuration.nodes[$0].id != key.owner }
            }
            #expect(withoutFailover == nil)
            let allDown = bytes.withUnsafeBytes { buffer in router.route(buffer, failover: true) { _ in false } }
            #expect(allDown == nil)
        }
    }

    @Test("a node from an address as people write it, or nil")
    func nodeFromAddress() {
        #expect(CachetClient.Node(address: "127.0.0.1:7421") == .init(host: "127.0.0.1", port: 7421))
        #expect(CachetClient.Node(address: " cache.local ") == .init(host: "cache.local", port: 7420))
        #expect(CachetClient.Node(address: "[::1]:7422") == .init(host: "::1", port: 7422))
        #expect(CachetClient.Node(address: "[::1]") == .init(host: "::1", port: 7420))
        #expect(CachetClient.Node(address: "::1") == .init(host: "::1", port: 7420))
        for bad in ["", ":7420", "host:", "host:x", "host:0", "host:70000", "[::1", "[::1]7420", "[]:1"] {
            #expect(CachetClient.Node(address: bad) == nil, "\(bad)")
        }
    }

    @Test("a configuration that cannot work is refused with a message naming the field")
    func invalidConfigurations() {
        func refused(_ configure: (inout CachetClient.Configuration) -> Void) -> String? {
            var configuration = CachetClient.Configuration(nodes: [.init(host: "127.0.0.1", port: 7420)])
            configure(&configuration)
            do {
                _ = try CachetClient(configuration: configuration)
                return nil
            } catch {
                #expect(error.code == .invalidConfiguration)
                return error.message
            }
        }
        #expect(refused { $0.nodes = [] }?.contains("no nodes") == true)
        #expect(refused { $0.nodes.append(.init(host: "127.0.0.1", port: 7420)) }?.contains("twice") == true)
        #expect(refused { $0.nodes = [.init(host: "127.0.0.1", port: 0)] }?.contains("port 0") == true)
        #expect(refused { $0.requestTimeout = .zero }?.contains("requestTimeout") == true)
        #expect(refused { $0.connectionsPerNode = 0 }?.contains("connectionsPerNode") == true)
        #expect(refused { $0.virtualNodesPerMember = 0 }?.contains("virtualNodesPerMember") == true)
        #expect(refused { $0.maximumSpin = .milliseconds(2) }?.contains("maximumSpin") == true)
        #expect(refused { $0.maximumSpin = .microseconds(-1) }?.contains("maximumSpin") == true)
        #expect(refused { $0.maximumSpin = .zero } == nil)
        #expect(refused { _ in } == nil)
    }

    @Test("node ids default to host:port, as a cluster file's")
    func nodeIDs() {
        #expect(CachetClient.Node(host: "127.0.0.1", port: 7420).id == "127.0.0.1:7420")
        #expect(
            CachetClient.Node(host: "cache-1", port: 7420).id == CachetClusterMember(host: "cache-1", port: 7420).id
        )
        #expect(CachetClient.Node(host: "cache-1", port: 7420, id: "a").id == "a")
    }

    @Test("a cluster file gives the nodes, their ids and the virtual node count; keys go where the membership says")
    func clusterFile() throws {
        let directory = TemporaryDirectory(prefix: "cachet-client-cluster")
        let path = directory.appending("cluster.json")
        let json = """
            {"members": [{"id": "n1", "host": "127.0.0.1", "port": 7420},
                         {"id": "n2", "host": "127.0.0.1", "port": 7421},
                         {"host": "127.0.0.1", "port": 7422}],
             "virtual_nodes_per_member": 40}
            """
        _ = FileManager.default.createFile(atPath: path, contents: Data(json.utf8))
        let configuration = try CachetClient.Configuration(clusterFile: path)
        #expect(Set(configuration.nodes.map(\.id)) == ["n1", "n2", "127.0.0.1:7422"])
        #expect(configuration.virtualNodesPerMember == 40)
        let membership = try CachetMembership(contentsOfFile: path)
        let router = try CachetClientRouter(nodes: configuration.nodes, virtualNodesPerMember: 40)
        for index in 0..<200 {
            let key = Array("key:\(index)".utf8)
            let owner = key.withUnsafeBytes { configuration.nodes[router.owner(of: $0)] }
            #expect(owner.id == membership.owner(of: key).id)
            #expect(owner.port == membership.owner(of: key).port)
        }

        _ = FileManager.default.createFile(atPath: path, contents: Data(#"{"members": [{"hots": "x"}]}"#.utf8))
        do {
            _ = try CachetClient.Configuration(clusterFile: path)
            Issue.record("a bad cluster file was accepted")
        } catch {
            #expect(error.code == .invalidConfiguration)
            #expect(error.message.contains(path))
        }
    }
}
