import CachetClient
import CachetCluster
import CachetIO
import CachetTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// CachetClient against nodes of one cluster file, which forward, stand in and hold
/// (`Protocol/CLUSTER.md`): the client's own failover meets the nodes' and no GET returns an older value.
@Suite("CachetClient against a cluster of forwarding nodes")
struct ClientClusterFileTests {
    /// Three nodes n1 to n3 of one cluster file, on ports chosen before they start.
    final class Members: @unchecked Sendable {
        // Set up once on a thread of its own; afterwards only read, and the processes only signalled.
        let directory = TemporaryDirectory(prefix: "cachet-client-cluster")
        let file: String
        var ports: [String: Int] = [:]
        var processes: [String: NodeProcess] = [:]

        init() throws {
            file = directory.appending("cluster.json")
            var probes: [Int32] = []
            for id in ["n1", "n2", "n3"] {
                let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
                probes.append(fd)
                ports[id] = port
            }
            for fd in probes { close(fd) }
            let entries = ["n1", "n2", "n3"].map {
                "{\"id\": \"\($0)\", \"host\": \"127.0.0.1\", \"port\": \(ports[$0]!)}"
            }
            try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}").utf8)
                .write(to: URL(fileURLWithPath: file))
            for id in ["n1", "n2", "n3"] { try start(id) }
        }

        func start(_ id: String) throws {
            processes[id] = try NodeProcess(arguments: [
                "--cluster", file, "--node-id", id, "--port", "\(ports[id]!)",
                // A disk tier kept across restarts: a restarted owner has its older values back.
                "--data-dir", directory.appending("data-\(id)"), "--disk-limit", "64MiB",
                "--probe-interval", "0.1", "--forward-timeout", "0.3",
            ])
        }

        /// Runs `body` on a thread of its own (starting nodes blocks), off the tasks' cooperative pool.
        static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
            let result = await withCheckedContinuation {
                (continuation: CheckedContinuation<Result<T, any Error>, Never>) in
                Thread.detachNewThread { continuation.resume(returning: Result { try body() }) }
            }
            return try result.get()
        }

        deinit {
            for process in processes.values where process.process.isRunning {
                process.stop(signal: SIGKILL, timeout: 5)
            }
        }
    }

    @Test("an owner killed and restarted: the client fails over, and never reads the older value")
    func ownerKilledAndRestarted() async throws {
        let members = try await Members.onThread { try Members() }
        let membership = try CachetMembership(contentsOfFile: members.file)
        let key = (0...).lazy.map { "key-\($0)" }.first { membership.owner(of: $0).id == "n1" }!
        var configuration = try CachetClient.Configuration(clusterFile: members.file)
        configuration.requestTimeout = .seconds(1)
        configuration.connectTimeout = .seconds(1)
        try await withClient(configuration) { client in
            try await client.put(key, value: Array("v1".utf8))
            #expect(try await client.get(key) == Array("v1".utf8))
            // v1 on n1's disk, so that its restart brings it back.
            let written = try await Members.onThread {
                let socket = try members.processes["n1"]!.connect()
                let deadline = Date().addingTimeInterval(5)
                while Date() < deadline {
                    let stats = String(decoding: try socket.roundTrip(.stats).body, as: UTF8.self)
                    if !stats.contains("\"disk_items\":0,") { return true }
                    Thread.sleep(forTimeInterval: 0.02)
                }
                return false
            }
            #expect(written)

            members.processes["n1"]!.stop(signal: SIGKILL)
            // The client finds n1 refusing and goes to the next node of the key's preference list, which
            // stands in for n1 (the nodes see n1 down too).
            var rewritten = false
            let deadline = ContinuousClock.now + .seconds(5)
            while !rewritten && ContinuousClock.now < deadline {
                do {
                    try await client.put(key, value: Array("v2".utf8))
                    rewritten = true
                } catch {
                    try await Task.sleep(for: .milliseconds(50))
                }
            }
            #expect(rewritten, "no write of the key succeeded while its owner was down")

            try await Members.onThread { try members.start("n1") }
            var seen: [[UInt8]?] = []
            let watchUntil = ContinuousClock.now + .seconds(3)
            while ContinuousClock.now < watchUntil {
                if let value = try? await client.get(key) { seen.append(value) }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(!seen.contains(Array("v1".utf8)), "the client read v1 after v2 was acknowledged")
        }
    }
}
