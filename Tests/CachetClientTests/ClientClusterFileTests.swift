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
@Suite("CachetClient against a cluster of forwarding nodes", .nodeTurn)
struct ClientClusterFileTests {
    /// Three nodes n1 to n3 of one cluster file, on ports chosen before they start.
    final class Members: @unchecked Sendable {
        // Set up once on a thread of its own; afterwards only read, and the processes only signalled.
        let directory = TemporaryDirectory(prefix: "cachet-client-cluster")
        let file: String
        var ports: [String: Int] = [:]
        var processes: [String: NodeProcess] = [:]
        /// Flags for every node, after the cluster's.
        let extraArguments: [String]

        init(extraArguments: [String] = []) throws {
            self.extraArguments = extraArguments
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
            // A node that probed its peers before they listened took itself for cut off (in the minority):
            // it holds its keys until it reaches them, then for its hold period. Tests start from a cluster
            // that serves.
            let unsettled = try waitUntilSettled(["n1", "n2", "n3"], within: 15) { try stats($0) }
            #expect(unsettled == nil, "the cluster did not settle after its start: \(unsettled ?? "")")
        }

        func start(_ id: String) throws {
            processes[id] = try NodeProcess(
                arguments: [
                    "--cluster", file, "--node-id", id, "--port", "\(ports[id]!)",
                    // A disk tier kept across restarts: a restarted owner has its older values back.
                    "--data-dir", directory.appending("data-\(id)"), "--disk-limit", "64MiB",
                    "--probe-interval", "0.1", "--forward-timeout", "0.3",
                ] + extraArguments
            )
        }

        /// Member `id`'s STATS.
        func stats(_ id: String) throws -> [String: Any] {
            let reply = try processes[id]!.connect().roundTrip(.stats)
            return try JSONSerialization.jsonObject(with: Data(reply.body)) as! [String: Any]
        }

        /// The size of member `id`'s stand-in log file (16 bytes when it owes no one anything).
        func standInLogSize(_ id: String) -> Int {
            (try? FileManager.default.attributesOfItem(atPath: directory.appending("data-\(id)/standin-log"))[.size]
                as? Int) ?? 0
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

    /// Failover without stale reads through CachetClient, where only the owner's hold protects: v1 on the
    /// owner n1's disk, covered by a checkpoint of its invalidation journal so that a SIGKILL cannot drop
    /// it; n1 killed; the client fails over and writes v2 to the stand-in n2; n2 stopped (SIGSTOP), so that
    /// it cannot tell n1 yet; n1 restarted with v1 on its disk; the client sees n1 back and sends it the
    /// key's GETs; n2 resumed a moment later, and delivers. No GET returns v1, and a control key written
    /// with v1 and never overwritten is served from n1's disk once its hold is over (v1 was there to serve).
    /// The hold is 3 s, longer than n2's outage after n1's start (about a second): the default hold covers
    /// a stand-in that notices the return within its probe backoff, not one that is stopped besides.
    /// With `--hold-period 0` the client reads v1 from n1 until n2 has delivered.
    @Test("an owner killed and restarted: the client fails over, and never reads the older value")
    func ownerKilledAndRestarted() async throws {
        let members = try await Members.onThread { try Members(extraArguments: ["--hold-period", "3"]) }
        let membership = try CachetMembership(contentsOfFile: members.file)
        let key = (0...).lazy.map { "key-\($0)" }.first {
            membership.preferenceList(for: Array($0.utf8), count: 3).map(\.id) == ["n1", "n2", "n3"]
        }!
        let control = (0...).lazy.map { "control-\($0)" }.first { membership.owner(of: $0).id == "n1" }!
        // 4,100 other keys of n1: its journal checkpoints once 4,096 operations have been journaled, and
        // after a SIGKILL it drops every key journaled since its last checkpoint (`Protocol/DISK-FORMAT.md`).
        let fillers = Array((0...).lazy.map { "f\($0)" }.filter { membership.owner(of: $0).id == "n1" }.prefix(4100))
        var configuration = try CachetClient.Configuration(clusterFile: members.file)
        configuration.requestTimeout = .seconds(1)
        configuration.connectTimeout = .seconds(1)
        // The client sees n1 back within 0.2 s of its return.
        configuration.probeMaximumBackoff = .milliseconds(200)
        try await withClient(configuration) { client in
            try await client.put(key, value: Array("v1".utf8))
            try await client.put(control, value: Array("v1".utf8))
            #expect(try await client.get(key) == Array("v1".utf8))
            // In batches that a loaded node answers well within the request timeout; a batch that times out
            // all the same (the whole suite runs beside it on two cores, and its disk queue fills) is sent
            // again: the fillers are the test's setting, not what it checks.
            let fillersBy = ContinuousClock.now + .seconds(30)
            for chunk in stride(from: 0, to: fillers.count, by: 200) {
                let batch = fillers[chunk..<min(chunk + 200, fillers.count)].map { (Array($0.utf8), [UInt8]([1])) }
                while true {
                    do {
                        try await client.put(batch)
                        break
                    } catch let error as CachetClientError
                        where error.code == .timeout && ContinuousClock.now < fillersBy
                    {
                        try await Task.sleep(for: .milliseconds(100))
                    }
                }
            }
            let onDisk = try await Members.onThread {
                let deadline = Date().addingTimeInterval(20)
                while Date() < deadline {
                    let stats = try members.stats("n1")
                    if stats["disk_items"] as? Int == fillers.count + 2 && stats["disk_queue_depth"] as? Int == 0 {
                        return true
                    }
                    Thread.sleep(forTimeInterval: 0.05)
                }
                return false
            }
            #expect(onDisk, "v1 and the fillers on n1's disk")

            members.processes["n1"]!.stop(signal: SIGKILL)
            // The client finds n1 refusing and goes to the next node of the key's preference list, n2, which
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
            #expect(members.standInLogSize("n2") > 16, "n2 took the write as n1's stand-in")

            let standIn = members.processes["n2"]!.process.processIdentifier
            #expect(await freeze(standIn), "n2 stopped")
            defer { kill(standIn, SIGCONT) }
            try await Members.onThread { try members.start("n1") }
            // The client probes n1 and routes the key to it again, while n2 still cannot deliver.
            let routedBy = ContinuousClock.now + .seconds(3)
            while !client.isUp(node: "n1") && ContinuousClock.now < routedBy {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(client.isUp(node: "n1"), "the client routes to n1 again")
            let resumer = Task {
                try? await Task.sleep(for: .milliseconds(500))
                kill(standIn, SIGCONT)
            }
            var seen: [[UInt8]?] = []
            let watchUntil = ContinuousClock.now + .seconds(4)
            while ContinuousClock.now < watchUntil {
                if let value = try? await client.get(key) { seen.append(value) }
                try await Task.sleep(for: .milliseconds(20))
            }
            await resumer.value
            #expect(!seen.contains(Array("v1".utf8)), "the client read v1 after v2 was acknowledged")

            // n2 delivered (its log is back to its header) and dropped its copy.
            let delivered = try await Members.onThread {
                let deadline = Date().addingTimeInterval(5)
                while members.standInLogSize("n2") != 16 && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
                return members.standInLogSize("n2") == 16
            }
            #expect(delivered, "n2 told n1")
            // v2 handed back to n1 (while n1 held), or deleted there (n2 spoke after n1's hold): never v1.
            let after = try await client.get(key)
            #expect(after == nil || after == Array("v2".utf8), "\(String(decoding: after ?? [], as: UTF8.self))")
            // v1 really was on n1's disk: once its hold is over (3 s, at most 4 × that while invalidations
            // come), n1 serves it for the key no one overwrote.
            var restored: [UInt8]?
            let restoredBy = ContinuousClock.now + .seconds(6)
            while restored == nil && ContinuousClock.now < restoredBy {
                restored = try? await client.get(control)
                if restored == nil { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(restored == Array("v1".utf8), "the control key from n1's disk after its hold")
        }
    }
}
