import CachetCluster
import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Forwarding between real node processes (`Protocol/CLUSTER.md`, "Forwarding"): a node that gets a key
/// another member owns sends it there and relays the answer, so any node serves any key; a forwarded
/// request is never forwarded again; an owner that is gone or frozen is answered UNAVAILABLE quickly.
@Suite("Node: forwarding to the key's owner", .dedicatedThreads)
struct NodeForwardingTests {
    /// Nodes of one cluster file on free ports, n1 to nN (three unless told otherwise).
    final class Cluster {
        let directory = TemporaryDirectory(prefix: "cachet-forwarding")
        let file: String
        let membership: CachetMembership
        let extraArguments: [String]
        /// Whether each member has a disk tier of its own, kept across restarts.
        let disk: Bool
        var ports: [String: Int] = [:]
        var nodes: [String: NodeProcess] = [:]

        /// - Parameters:
        ///   - members: how many nodes.
        ///   - extraArguments: flags for every node.
        ///   - host: how the cluster file names the members' host (they listen on 127.0.0.1 whatever it says).
        init(members: Int = 3, extraArguments: [String] = [], host: String = "127.0.0.1", disk: Bool = false) throws {
            self.extraArguments = extraArguments
            self.disk = disk
            var ports: [Int] = []
            var probes: [Int32] = []
            for _ in 0..<members {
                let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
                probes.append(fd)
                ports.append(port)
            }
            for fd in probes { close(fd) }
            let entries = ports.enumerated().map { index, port in
                "{\"id\": \"n\(index + 1)\", \"host\": \"\(host)\", \"port\": \(port)}"
            }
            file = directory.appending("cluster.json")
            try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}\n").utf8)
                .write(to: URL(fileURLWithPath: file))
            membership = try CachetMembership(contentsOfFile: file)
            for (index, id) in (1...members).map({ "n\($0)" }).enumerated() {
                self.ports[id] = ports[index]
                try start(id)
            }
            // A node that probed its peers before they listened took itself for cut off (in the minority):
            // it holds its keys until it reaches them, then for its hold period. Tests start from a cluster
            // that serves.
            let settled = try waitUntilServing(within: 15)
            #expect(settled == nil, "the cluster did not settle after its start: \(settled ?? "")")
        }

        /// Polls every node's STATS until each sees every peer up and neither is in the minority nor holds,
        /// for at most `seconds`; nil once it does, else what the last STATS showed that was not.
        func waitUntilServing(within seconds: Double) throws -> String? {
            try waitUntilSettled(nodes.keys.sorted(), within: seconds) { try stats($0) }
        }

        /// Starts (or restarts) member `id` on its own port (NodeProcess asks for port 0 unless told).
        func start(_ id: String, clusterFile: String? = nil, extraArguments more: [String] = []) throws {
            let storage =
                disk
                ? ["--data-dir", directory.appending("data-\(id)"), "--disk-limit", "64MiB"] : ["--disk-limit", "0"]
            nodes[id] = try NodeProcess(
                arguments: [
                    "--cluster", clusterFile ?? file, "--node-id", id, "--host", "127.0.0.1", "--port", "\(ports[id]!)",
                ]
                    + storage + extraArguments + more
            )
        }

        /// Polls `on`'s STATS until `id`'s state is `state`, for at most `seconds`; returns the last state.
        func waitForState(of id: String, on node: String, toBe state: String, within seconds: Double) throws -> String?
        {
            try waitForMemberState(of: id, toBe: state, within: seconds) { try stats(node) }
        }

        /// The state `node` reports for member `id` in its STATS.
        func stateOf(_ id: String, on node: String) throws -> String? {
            let members = try stats(node)["cluster_members"] as? [[String: Any]] ?? []
            return members.first { $0["id"] as? String == id }?["state"] as? String
        }

        func node(_ id: String) -> NodeProcess { nodes[id]! }

        /// The id of the member that owns `key`.
        func owner(of key: String) -> String { membership.owner(of: key).id }

        /// A key owned by `id`, and not by the others.
        func key(ownedBy id: String, prefix: String = "k") -> String {
            (0...).lazy.map { "\(prefix)\($0)" }.first { owner(of: $0) == id }!
        }

        func stats(_ id: String) throws -> [String: Any] { try node(id).stats() }

        deinit {
            for node in nodes.values { node.stop(signal: SIGKILL) }
        }
    }

    static func get(_ key: String, from socket: TestSocket, flags: CachetRequestFlags = [], id: UInt32 = 1) throws
        -> CachetResponse
    {
        try socket.send(CachetCommand.get(key: Array(key.utf8)).encoded(id: id, flags: flags))
        return try socket.readResponse()
    }

    /// Sends `command` (a write of a down member's key) through `socket` until it is not UNAVAILABLE, for at
    /// most `seconds`: a member down by timeouts is stood in for once a majority sees it down, which each
    /// member asks the others on its next probe tick (`Protocol/CLUSTER.md`, "Health").
    static func writeOnceStoodIn(_ command: CachetCommand, on socket: TestSocket, within seconds: Double = 2) throws
        -> CachetResponse
    {
        var reply = try socket.roundTrip(command)
        let deadline = Date().addingTimeInterval(seconds)
        while reply.status == .unavailable && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.05)
            reply = try socket.roundTrip(command)
        }
        return reply
    }

    @Test func everyKeyIsServedThroughEveryNodeAndStoredOnlyOnItsOwner() throws {
        let cluster = try Cluster()
        let ids = ["n1", "n2", "n3"]
        let sockets = try ids.map { try cluster.node($0).connect() }
        let keys = (0..<60).map { "key-\($0)" }
        for (index, key) in keys.enumerated() {
            let put = CachetCommand.put(key: Array(key.utf8), value: Array("v\(index)".utf8), ttl: 0)
            #expect(try sockets[index % 3].roundTrip(put, id: UInt32(index)).status == .ok)
        }
        for (index, key) in keys.enumerated() {
            for (node, socket) in zip(ids, sockets) {
                let reply = try Self.get(key, from: socket, id: UInt32(1000 + index))
                #expect(reply.status == .ok && reply.body == Array("v\(index)".utf8), "\(key) through \(node)")
                #expect(reply.id == UInt32(1000 + index) && reply.opcode == .get)
            }
            // Asked with `forwarded` set, each node answers from its own store: only the owner has it.
            for (node, socket) in zip(ids, sockets) {
                let local = try Self.get(key, from: socket, flags: .forwarded)
                let expected: CachetStatus = node == cluster.owner(of: key) ? .ok : .notFound
                #expect(local.status == expected, "\(key) on \(node), owned by \(cluster.owner(of: key))")
            }
        }
        let stats = try ids.map { try cluster.stats($0) }
        #expect(stats.map { $0["items"] as? Int ?? 0 }.reduce(0, +) == keys.count)
        #expect(stats.allSatisfy { ($0["forwards"] as? Int ?? 0) > 0 && $0["forward_failures"] as? Int == 0 })
        // A DEL through a node that does not own the key removes it from the owner.
        let key = cluster.key(ownedBy: "n3")
        _ = try sockets[2].roundTrip(.put(key: Array(key.utf8), value: [1], ttl: 0))
        #expect(try sockets[0].roundTrip(.delete(key: Array(key.utf8))).status == .ok)
        #expect(try Self.get(key, from: sockets[2]).status == .notFound)
    }

    @Test func pipelinedRequestsForDifferentOwnersAreAnsweredInOrder() throws {
        let cluster = try Cluster()
        let socket = try cluster.node("n1").connect()
        let keys = (0..<30).map { "p\($0)" }
        var batch: [UInt8] = []
        for (index, key) in keys.enumerated() {
            CachetCommand.put(key: Array(key.utf8), value: Array(key.utf8), ttl: 0).encode(
                id: UInt32(index),
                to: &batch
            )
            CachetCommand.get(key: Array(key.utf8)).encode(id: UInt32(100 + index), to: &batch)
        }
        try socket.send(batch)
        for (index, key) in keys.enumerated() {
            let put = try socket.readResponse()
            #expect(put.id == UInt32(index) && put.opcode == .put && put.status == .ok, "\(put)")
            let get = try socket.readResponse()
            #expect(
                get.id == UInt32(100 + index) && get.body == Array(key.utf8),
                "\(key), owner \(cluster.owner(of: key))"
            )
        }
        #expect(Set(keys.map(cluster.owner(of:))).count == 3, "the keys span every member")
    }

    @Test func aForwardedWriteForAnotherOwnerIsConfirmedWithItAndCounted() throws {
        // A node whose view disagrees (another cluster file, or other members down) sends a key to a node
        // that routes it elsewhere: that node does not keep a copy nobody would read, but has the member it
        // routes the key to (here the owner) drop its own, and acknowledges the write once it has; it counts
        // the disagreement. An older value on the owner is therefore gone before the write is acknowledged.
        let cluster = try Cluster()
        let key = cluster.key(ownedBy: "n1")
        let n1 = try cluster.node("n1").connect()
        #expect(try n1.roundTrip(.put(key: Array(key.utf8), value: [6], ttl: 0)).status == .ok)
        let n2 = try cluster.node("n2").connect()
        let put = CachetCommand.put(key: Array(key.utf8), value: [7], ttl: 0).encoded(id: 5, flags: .forwarded)
        try n2.send(put)
        #expect(try n2.readResponse().status == .ok)
        #expect(try Self.get(key, from: n2, flags: .forwarded).status == .notFound)
        #expect(try Self.get(key, from: n1).status == .notFound, "the owner's older copy is gone")
        var stats = try cluster.stats("n2")
        #expect((stats["routing_disagreements"] as? Int ?? 0) >= 1)
        #expect(stats["forwards"] as? Int == 1, "one confirmation")
        // An invalidation is served where it arrives, never confirmed further (no chain of peers waiting on
        // each other).
        let invalidation = CachetCommand.delete(key: Array(key.utf8)).encoded(
            id: 6,
            flags: [.forwarded, .invalidation]
        )
        try n2.send(invalidation)
        #expect([.ok, .notFound].contains(try n2.readResponse().status))
        stats = try cluster.stats("n2")
        #expect(stats["forwards"] as? Int == 1, "no confirmation of an invalidation")
    }

    /// n3 killed, then n2 frozen: n1 answers their keys UNAVAILABLE quickly (a refusal at once, a freeze at
    /// the forward deadline). n1 then reaches only itself, one of three members: by the minority rule it
    /// misses its own key at once (never waiting on a peer) and refuses its writes, until n2 answers again
    /// and its hold has passed.
    @Test func anOwnerThatIsGoneOrFrozenIsAnsweredUnavailableQuickly() throws {
        try goneOrFrozen(servingOwnKeysInMinority: false)
    }

    /// The same with `--serve-own-keys-in-minority`: n1, alone, goes on serving its own key (and reports
    /// that it is in the minority).
    @Test func withTheOptOutANodeInTheMinorityServesItsOwnKeys() throws {
        try goneOrFrozen(servingOwnKeysInMinority: true)
    }

    func goneOrFrozen(servingOwnKeysInMinority optOut: Bool) throws {
        // A short hold: once thawed, n2 misses its own keys for that long (it may have been away), and n1
        // its own once it reaches a majority again.
        // A deadline long enough that a loaded machine does not trip it before the freeze (a peer that times
        // out three times is marked down, and its keys would go to a stand-in).
        let cluster = try Cluster(
            extraArguments: ["--forward-timeout", "1", "--hold-period", "0.5"]
                + (optOut ? ["--serve-own-keys-in-minority"] : [])
        )
        for id in ["n2", "n3"] {
            #expect(try cluster.waitForState(of: id, on: "n1", toBe: "up", within: 5) == "up")
        }
        let n1 = try cluster.node("n1").connect()
        let frozenKey = cluster.key(ownedBy: "n2")
        let goneKey = cluster.key(ownedBy: "n3")
        let liveKey = cluster.key(ownedBy: "n1")
        for key in [frozenKey, goneKey, liveKey] {
            #expect(try n1.roundTrip(.put(key: Array(key.utf8), value: [1], ttl: 0)).status == .ok)
        }

        // Killed: the connection is refused (nothing was sent), so the GET goes at once to where the key is
        // routed now, the stand-in, which holds nothing written for n3 while it was gone: a miss.
        _ = cluster.node("n3").stop(signal: SIGKILL)
        var started = Date()
        let gone = try Self.get(goneKey, from: n1)
        #expect(gone.status == .notFound, "\(gone.status): \(String(decoding: gone.body, as: UTF8.self))")
        #expect(Date().timeIntervalSince(started) < 1)
        // n1 still reaches n2: two of three, a majority; its own key is served.
        #expect(try Self.get(liveKey, from: n1).body == [1])
        #expect(try cluster.stats("n1")["in_minority"] as? Bool == false)

        // Frozen: nothing answers, so the deadline (1 s) does.
        #expect(freeze(cluster.node("n2").process.processIdentifier), "n2 stopped")
        defer { kill(cluster.node("n2").process.processIdentifier, SIGCONT) }
        started = Date()
        let frozen = try Self.get(frozenKey, from: n1)
        let waited = Date().timeIntervalSince(started)
        #expect(frozen.status == .unavailable)
        #expect(waited >= 0.9 && waited < 3, "answered after \(waited) s")

        // n2 timed out (suspect) and n3 is down: n1 reaches one member of three, the minority.
        var stats = try cluster.stats("n1")
        #expect(stats["in_minority"] as? Bool == true, "\(stats)")
        let entries = stats["minority_entries"] as? Int ?? 0
        #expect(entries >= 1, "\(stats)")
        started = Date()
        let own = try Self.get(liveKey, from: n1)
        let ownWaited = Date().timeIntervalSince(started)
        let write = try n1.roundTrip(.put(key: Array(liveKey.utf8), value: [2], ttl: 0))
        let writeWaited = Date().timeIntervalSince(started) - ownWaited
        if optOut {
            // Keys of n1 are not held up.
            #expect(own.status == .ok && own.body == [1], "\(own)")
            #expect(write.status == .ok)
            #expect(try Self.get(liveKey, from: n1).body == [2])
        } else {
            // A miss at once: no peer is up to stand in, and none is waited for.
            #expect(own.status == .notFound, "\(own)")
            #expect(write.status == .unavailable)
            let message = String(decoding: write.body, as: UTF8.self)
            #expect(message.contains("majority") && message.contains("1 of the cluster's 3"), "\(message)")
        }
        #expect(ownWaited < 0.5 && writeWaited < 0.5, "answered after \(ownWaited) s and \(writeWaited) s")
        stats = try cluster.stats("n1")
        // The frozen owner's GET; the refused one went to the stand-in.
        #expect(stats["forward_failures"] as? Int == 1, "\(stats)")
        #expect(stats["minority_misses"] as? Int == (optOut ? 0 : 2), "\(stats)")
        #expect(stats["holding"] as? Bool == !optOut, "\(stats)")

        // Thawed, the frozen owner answers again; the late reply to the expired forward is dropped.
        kill(cluster.node("n2").process.processIdentifier, SIGCONT)
        var deadline = Date().addingTimeInterval(5)
        var back = try Self.get(frozenKey, from: n1)
        while back.status != .ok && Date() < deadline { back = try Self.get(frozenKey, from: n1) }
        #expect(back.status == .ok && back.body == [1])
        // n1 reaches a majority again and, after its hold, serves its own key.
        let expected: [UInt8] = optOut ? [2] : [1]
        deadline = Date().addingTimeInterval(5)
        var ownBack = try Self.get(liveKey, from: n1)
        while ownBack.body != expected && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.05)
            ownBack = try Self.get(liveKey, from: n1)
        }
        #expect(ownBack.status == .ok && ownBack.body == expected, "\(ownBack)")
        stats = try cluster.stats("n1")
        #expect(stats["in_minority"] as? Bool == false && stats["minority_entries"] as? Int == entries, "\(stats)")
    }

    /// A write whose forward to the owner is refused (the owner is gone: its port is closed) goes to the
    /// stand-in in the same request: nothing was sent, so nothing can have been applied (issue 22, item 3).
    @Test func aWriteRefusedByAGoneOwnerGoesToTheStandInInTheSameRequest() throws {
        let cluster = try Cluster()
        // Owned by n1, stood in for by n3, written through n2 (which then forwards to either).
        let key = Array(
            (0...).lazy.map { "f\($0)" }.first {
                cluster.membership.preferenceList(for: Array($0.utf8), count: 3).map(\.id) == ["n1", "n3", "n2"]
            }!.utf8
        )
        let n2 = try cluster.node("n2").connect()
        #expect(try n2.roundTrip(.put(key: key, value: Array("v1".utf8), ttl: 0)).status == .ok)
        _ = cluster.node("n1").stop(signal: SIGKILL)
        // Long enough for n2 to see its connection to n1 closed, short of its next probe (1 s).
        Thread.sleep(forTimeInterval: 0.05)
        let reply = try n2.roundTrip(.put(key: key, value: Array("v2".utf8), ttl: 0))
        #expect(reply.status == .ok, "\(reply.status): \(String(decoding: reply.body, as: UTF8.self))")
        // The stand-in took v2; a GET may miss (n3 may not have seen n1 go yet, and then does not serve what
        // it took), never return v1.
        #expect(try Self.get(String(decoding: key, as: UTF8.self), from: n2).body != Array("v1".utf8))
    }

    @Test func clusterWideStatsAndClearAskEveryMemberAndReportTheDeadOnes() throws {
        let cluster = try Cluster(extraArguments: ["--forward-timeout", "0.5"])
        let n2 = try cluster.node("n2").connect()
        let keys = (0..<30).map { "c\($0)" }
        for key in keys {
            #expect(try n2.roundTrip(.put(key: Array(key.utf8), value: [1, 2], ttl: 0)).status == .ok)
        }
        // Every member answers: the totals are the whole cluster's.
        try n2.send(CachetCommand.stats.encoded(id: 9, flags: .cluster))
        var reply = try n2.readResponse()
        #expect(reply.status == .ok && reply.id == 9)
        var stats = try JSONSerialization.jsonObject(with: Data(reply.body)) as! [String: Any]
        #expect(stats["cluster"] as? Bool == true && stats["answered_by"] as? String == "n2")
        #expect(stats["members_total"] as? Int == 3 && stats["members_ok"] as? Int == 3)
        #expect((stats["totals"] as? [String: Any])?["items"] as? Int == keys.count)

        // One member gone: reported, not waited on beyond the deadline; the others' figures still add up.
        let deadKeys = keys.filter { cluster.owner(of: $0) == "n3" }.count
        _ = cluster.node("n3").stop(signal: SIGKILL)
        let started = Date()
        try n2.send(CachetCommand.stats.encoded(id: 10, flags: .cluster))
        reply = try n2.readResponse()
        #expect(Date().timeIntervalSince(started) < 2)
        stats = try JSONSerialization.jsonObject(with: Data(reply.body)) as! [String: Any]
        #expect(stats["members_total"] as? Int == 3 && stats["members_ok"] as? Int == 2)
        #expect((stats["totals"] as? [String: Any])?["items"] as? Int == keys.count - deadKeys)
        let members = stats["members"] as? [[String: Any]] ?? []
        #expect(members.map { $0["id"] as? String } == ["n1", "n2", "n3"])
        #expect(members.last?["status"] as? String == "unavailable")

        try n2.send(CachetCommand.clear.encoded(id: 11, flags: .cluster))
        reply = try n2.readResponse()
        #expect(reply.status == .ok && reply.id == 11)
        let clear = try CachetClusterClearReply(decoding: reply.body)
        #expect(clear.total.items == UInt64(keys.count - deadKeys))
        #expect(clear.members.map(\.id) == ["n1", "n2", "n3"])
        #expect(clear.members.map(\.status) == [.ok, .ok, .unavailable])
        #expect(clear.members[2].message.contains("n3"))
        for key in keys where cluster.owner(of: key) != "n3" {
            #expect(try Self.get(key, from: n2).status == .notFound, "\(key) survived the cluster-wide CLEAR")
        }
        // Without the flag, CLEAR and STATS are this node's own.
        #expect(try n2.roundTrip(.clear).body.count == 16)
    }
    @Test func peersAreProbedMarkedDownWhenGoneAndUpWhenBack() throws {
        let cluster = try Cluster(extraArguments: ["--probe-interval", "0.1"])
        #expect(try cluster.waitForState(of: "n3", on: "n1", toBe: "up", within: 5) == "up")
        let n1 = try cluster.node("n1").connect()
        let key = cluster.key(ownedBy: "n3")

        // Gone: the probes find out without any request; its keys then go to a stand-in at once, untried,
        // which has nothing written for them yet: a miss.
        _ = cluster.node("n3").stop(signal: SIGKILL)
        #expect(try cluster.waitForState(of: "n3", on: "n1", toBe: "down", within: 3) == "down")
        let started = Date()
        #expect(try Self.get(key, from: n1).status == .notFound)
        #expect(Date().timeIntervalSince(started) < 0.5)
        let stats =
            try JSONSerialization.jsonObject(
                with: Data(try n1.roundTrip(.stats, id: 3).body)
            ) as! [String: Any]
        #expect(stats["forward_failures"] as? Int == 0)

        // Back on its port: probed (after its backoff, 250 ms doubling), up again, asked again.
        try cluster.start("n3")
        #expect(try cluster.waitForState(of: "n3", on: "n1", toBe: "up", within: 10) == "up")
        #expect(try Self.get(key, from: n1).status == .notFound, "asked again (and empty after its restart)")
    }

    @Test func aNodeNeverMarksEveryPeerDown() throws {
        // Both peers gone at once: more likely this node lost its network, so one of them is held suspect
        // and keeps being asked rather than every key failing over to this node.
        let cluster = try Cluster(extraArguments: ["--probe-interval", "0.1"])
        #expect(try cluster.waitForState(of: "n3", on: "n1", toBe: "up", within: 5) == "up")
        #expect(try cluster.waitForState(of: "n2", on: "n1", toBe: "up", within: 5) == "up")
        _ = cluster.node("n2").stop(signal: SIGKILL)
        _ = cluster.node("n3").stop(signal: SIGKILL)
        let first = try cluster.waitForState(of: "n2", on: "n1", toBe: "down", within: 3)
        let second = try cluster.waitForState(of: "n3", on: "n1", toBe: "down", within: 1)
        let states = [first, second]
        #expect(states.contains("down") && states.contains("suspect"), "\(states)")
    }
    @Test func membersNamedByHostNameAreResolvedOffTheLoop() throws {
        // "localhost" may resolve to ::1 first, where nothing listens: the connect moves on to 127.0.0.1.
        let cluster = try Cluster(host: "localhost")
        let n1 = try cluster.node("n1").connect()
        for id in ["n2", "n3"] {
            let key = cluster.key(ownedBy: id)
            #expect(try n1.roundTrip(.put(key: Array(key.utf8), value: [9], ttl: 0)).status == .ok)
            #expect(try Self.get(key, from: try cluster.node(id).connect(), flags: .forwarded).body == [9])
        }
    }
    @Test func aPeerWithAnotherMembershipIsReportedAndLogged() throws {
        // n3 reads a cluster file with the same members but another ring (virtual nodes): another hash.
        let cluster = try Cluster(extraArguments: ["--probe-interval", "0.1"])
        let other = cluster.directory.appending("other.json")
        let text = try String(contentsOfFile: cluster.file, encoding: .utf8)
            .replacingOccurrences(of: "{\"members\"", with: "{\"virtual_nodes_per_member\": 100, \"members\"")
        try Data(text.utf8).write(to: URL(fileURLWithPath: other))
        _ = cluster.node("n3").stop(signal: SIGKILL)
        try cluster.start("n3", clusterFile: other)
        let deadline = Date().addingTimeInterval(10)
        var disagreeing = 0
        repeat {
            disagreeing = try cluster.stats("n1")["cluster_peers_disagreeing"] as? Int ?? -1
            if disagreeing == 1 { break }
            Thread.sleep(forTimeInterval: 0.1)
        } while Date() < deadline
        #expect(disagreeing == 1)
        #expect(cluster.node("n1").log.contains("a peer's membership differs"))
        #expect(try cluster.stats("n2")["cluster_peers_disagreeing"] as? Int ?? 1 <= 1)
    }
}
