import CachetClient
import CachetCluster
import CachetIO
import CachetTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// CachetClient follows the cluster's membership without a restart (``CachetClient/refreshMembership()``):
/// a member added to the cluster file (and the nodes sent SIGHUP) gets its keys from the client directly,
/// and a member removed gets none.
@Suite("CachetClient follows the cluster's membership", .serialized)
struct ClientMembershipTests {
    /// Rewrites the members' cluster file with `ids`, each on its port.
    static func write(_ ids: [String], of members: ClientClusterFileTests.Members) throws {
        let entries = ids.map { "{\"id\": \"\($0)\", \"host\": \"127.0.0.1\", \"port\": \(members.ports[$0]!)}" }
        try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}").utf8)
            .write(to: URL(fileURLWithPath: members.file))
    }

    /// Waits until every running member in `ids` reports `hash`, polling between `Task.sleep`s.
    static func waitForHash(
        _ hash: String,
        on ids: [String],
        of members: ClientClusterFileTests.Members
    ) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        repeat {
            if try ids.allSatisfy({ try members.stats($0)["cluster_hash"] as? String == hash }) { return true }
            try await Task.sleep(for: .milliseconds(50))
        } while ContinuousClock.now < deadline
        return false
    }

    /// The forwards member `id` has made.
    static func forwards(_ id: String, of members: ClientClusterFileTests.Members) throws -> Int {
        try members.stats(id)["forwards"] as? Int ?? -1
    }

    @Test("a member added, then removed: the client routes to it, then around it, with no failed request")
    func addedThenRemoved() async throws {
        let members = try await ClientClusterFileTests.Members.onThread { try ClientClusterFileTests.Members() }
        var configuration = try CachetClient.Configuration(clusterFile: members.file)
        configuration.membershipRefreshInterval = .milliseconds(200)
        try await withClient(configuration) { client in
            #expect(await client.refreshMembership() == false, "the membership has not changed")

            // n4 joins: a port, the file with four members, n4 started on it, SIGHUP to the others.
            let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
            close(fd)
            members.ports["n4"] = port
            try Self.write(["n1", "n2", "n3", "n4"], of: members)
            let four = try CachetMembership(contentsOfFile: members.file)
            try await ClientClusterFileTests.Members.onThread { try members.start("n4") }
            for id in ["n1", "n2", "n3"] { kill(members.processes[id]!.process.processIdentifier, SIGHUP) }
            #expect(try await Self.waitForHash(four.membershipHashText, on: ["n1", "n2", "n3", "n4"], of: members))

            // The client follows within a few refreshes, and sends n4's keys to n4 itself.
            let keys = (0..<2000).map { "member:\($0)" }
            let ofN4 = keys.filter { four.owner(of: $0).id == "n4" }
            #expect(ofN4.count > 100)
            let followedBy = ContinuousClock.now + .seconds(5)
            while client.owner(of: ofN4[0]).id != "n4" && ContinuousClock.now < followedBy {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(client.owner(of: ofN4[0]).id == "n4", "the client follows the new membership")
            #expect(ofN4.allSatisfy { client.owner(of: $0).id == "n4" })
            let before = try ["n1", "n2", "n3"].map { try Self.forwards($0, of: members) }
            for key in ofN4 {
                try await client.put(key, value: Array(key.utf8))
                #expect(try await client.get(key) == Array(key.utf8))
            }
            let after = try ["n1", "n2", "n3"].map { try Self.forwards($0, of: members) }
            #expect(after == before, "no other member forwarded n4's keys: \(before) -> \(after)")
            #expect(try members.stats("n4")["items"] as? Int == ofN4.count)

            // n4 leaves: the file without it, SIGHUP to the others, n4 stopped; no request fails.
            try Self.write(["n1", "n2", "n3"], of: members)
            let three = try CachetMembership(contentsOfFile: members.file)
            for id in ["n1", "n2", "n3"] { kill(members.processes[id]!.process.processIdentifier, SIGHUP) }
            #expect(try await Self.waitForHash(three.membershipHashText, on: ["n1", "n2", "n3"], of: members))
            let leftBy = ContinuousClock.now + .seconds(5)
            while client.owner(of: ofN4[0]).id == "n4" && ContinuousClock.now < leftBy {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(keys.allSatisfy { client.owner(of: $0).id == three.owner(of: $0).id })
            #expect(await members.processes["n4"]!.terminate(signal: SIGTERM, timeout: 5) == 0)
            for key in keys.prefix(300) {
                try await client.put(key, value: [1])
                #expect(try await client.get(key) == [1])
            }
        }
    }
}
