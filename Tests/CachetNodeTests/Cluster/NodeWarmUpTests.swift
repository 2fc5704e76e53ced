import CachetCluster
import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Warm-up after a membership change (`Protocol/CLUSTER.md`, "Warm-up after a membership change"), on real
/// node processes: a member added to a loaded cluster answers a miss of a key it took over by asking the
/// key's previous owner, and keeps the value; a key written or deleted through it since the change never
/// comes back from there.
@Suite("Node: warm-up after a membership change", .serialized, .dedicatedThreads)
struct NodeWarmUpTests {
    typealias Cluster = NodeForwardingTests.Cluster

    /// In which order a member is added: the file is written first, then
    enum Order {
        /// the new member is started, the others are reloaded once it has seen them on the old file (the
        /// order docs/clustering.md gave before a member learned the change from its peers);
        case startThenWait
        /// the new member is started and the others reloaded at once, as a script does back to back;
        case backToBack
        /// the others are reloaded first, the new member started after (the file changed under every
        /// member at once, as on Kubernetes, and the new one scheduled last).
        case reloadFirst
    }

    /// n4 added to a three-member cluster in `order`, every node sent SIGHUP; returns the four-member
    /// membership once every member reads it and sees the others read it, and n1 sees n4 up.
    static func addN4(to cluster: Cluster, order: Order = .startThenWait) throws -> CachetMembership {
        let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        close(fd)
        cluster.ports["n4"] = port
        let entries = ["n1", "n2", "n3", "n4"].map {
            "{\"id\": \"\($0)\", \"host\": \"127.0.0.1\", \"port\": \(cluster.ports[$0]!)}"
        }
        try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}\n").utf8)
            .write(to: URL(fileURLWithPath: cluster.file))
        let four = try CachetMembership(contentsOfFile: cluster.file)
        let reloadOthers = {
            for id in ["n1", "n2", "n3"] { kill(cluster.node(id).process.processIdentifier, SIGHUP) }
        }
        switch order {
        case .startThenWait:
            try cluster.start("n4")
            // The new member first, which sees the others still on the old file, then the others reloaded.
            let seenBy = Date().addingTimeInterval(5)
            while try cluster.stats("n4")["cluster_peers_disagreeing"] as? Int ?? 0 == 0 && Date() < seenBy {
                Thread.sleep(forTimeInterval: 0.05)
            }
            reloadOthers()
        case .backToBack:
            try cluster.start("n4")
            reloadOthers()
        case .reloadFirst:
            reloadOthers()
            Thread.sleep(forTimeInterval: 0.3)
            try cluster.start("n4")
        }
        // n4 too (as `local-cluster.sh reload` does): a reload that changes nothing keeps n4's window.
        kill(cluster.node("n4").process.processIdentifier, SIGHUP)
        // Every member reads the four members, and every one has seen every other read them too.
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let hashes = try ["n1", "n2", "n3", "n4"].map { try cluster.stats($0)["cluster_hash"] as? String }
            let agreeing = try ["n1", "n2", "n3", "n4"].map {
                try cluster.stats($0)["cluster_peers_disagreeing"] as? Int
            }
            let n4Up = try (cluster.stats("n1")["cluster_members"] as? [[String: Any]] ?? []).contains {
                $0["id"] as? String == "n4" && $0["state"] as? String == "up"
            }
            if hashes.allSatisfy({ $0 == four.membershipHashText }) && agreeing.allSatisfy({ $0 == 0 }) && n4Up {
                break
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return four
    }

    static func run(warmUpSeconds: Double, order: Order = .startThenWait) throws -> (
        hits: Int, of: Int, written: Bool, deleted: Bool
    ) {
        // On data directories: a member that starts on a new one learns from its peers that it was just
        // added (one without a directory cannot tell a first start from a restart).
        let cluster = try Cluster(
            extraArguments: ["--probe-interval", "0.1", "--warm-up-seconds", "\(warmUpSeconds)"],
            disk: order != .startThenWait
        )
        let keys = (0..<400).map { "warm:\($0)" }
        let n1 = try cluster.node("n1").connect()
        for key in keys {
            #expect(try n1.roundTrip(.put(key: Array(key.utf8), value: Array(key.utf8), ttl: 0)).status == .ok)
        }
        // A cluster that started together asks no one: its members never saw another membership.
        for id in ["n1", "n2", "n3"] {
            #expect(try NodeForwardingTests.get("absent:\(id)", from: cluster.node(id).connect()).status == .notFound)
            let stats = try cluster.stats(id)
            #expect(stats["warm_up_hits"] as? Int == 0 && stats["warm_up_misses"] as? Int == 0, "\(id)")
        }
        let four = try addN4(to: cluster, order: order)
        let moved = keys.filter { four.owner(of: $0).id == "n4" }
        #expect(moved.count > 40, "\(moved.count) keys moved to n4")
        // A key written and one deleted through n4 after the change: never read back from before.
        let n4 = try cluster.node("n4").connect()
        #expect(try n4.roundTrip(.put(key: Array(moved[0].utf8), value: Array("new".utf8), ttl: 0)).status == .ok)
        #expect(try n4.roundTrip(.delete(key: Array(moved[1].utf8))).status == .notFound)
        // Settled: membership comparisons every probe round until every peer agrees (at most a few).
        Thread.sleep(forTimeInterval: 0.5)
        var hits = 0
        for key in moved.dropFirst(2) {
            let reply = try NodeForwardingTests.get(key, from: n1)
            if reply.status == .ok {
                #expect(reply.body == Array(key.utf8), "\(key)")
                hits += 1
            }
        }
        let written = try NodeForwardingTests.get(moved[0], from: n1).body == Array("new".utf8)
        let deleted = try NodeForwardingTests.get(moved[1], from: n1).status == .notFound
        // A second read is served by n4 itself: it kept what it was given.
        if warmUpSeconds > 0, let kept = moved.dropFirst(2).first {
            let direct = try NodeForwardingTests.get(kept, from: n4, flags: .forwarded)
            #expect(direct.body == Array(kept.utf8), "n4 kept the warmed value")
        }
        return (hits, moved.count - 2, written, deleted)
    }

    @Test func aMemberAddedToTheClusterAnswersTheKeysItTookOverFromTheirPreviousOwners() throws {
        let result = try Self.run(warmUpSeconds: 300)
        #expect(result.hits == result.of, "\(result.hits) of \(result.of) moved keys hit")
        #expect(result.written, "a key written through n4 after the change keeps that value")
        #expect(result.deleted, "a key deleted through n4 after the change stays deleted")
    }

    /// The same with the others reloaded right after n4 starts, before any comparison could show it a peer
    /// on the old file, and with the others reloaded before n4 starts: n4 learns the change from them.
    @Test(arguments: [Order.backToBack, .reloadFirst])
    func aMemberAddedInAnyOrderWarmsTheKeysItTookOver(order: Order) throws {
        let result = try Self.run(warmUpSeconds: 300, order: order)
        #expect(result.hits == result.of, "\(order): \(result.hits) of \(result.of) moved keys hit")
        #expect(result.written && result.deleted, "\(order)")
    }

    /// The other way: n4 removed from the file (the others sent SIGHUP; n4 still runs, on its old file),
    /// its keys go back to the others, which ask n4 for them while it still serves them.
    @Test func theMembersLeftAfterARemovalAskTheRemovedOneForItsKeys() throws {
        let cluster = try Cluster(extraArguments: ["--probe-interval", "0.1"])
        let four = try Self.addN4(to: cluster)
        let keys = (0..<400).map { "gone:\($0)" }.filter { four.owner(of: $0).id == "n4" }
        let n4 = try cluster.node("n4").connect()
        for key in keys {
            #expect(try n4.roundTrip(.put(key: Array(key.utf8), value: Array("v3".utf8), ttl: 0)).status == .ok)
        }
        let entries = ["n1", "n2", "n3"].map {
            "{\"id\": \"\($0)\", \"host\": \"127.0.0.1\", \"port\": \(cluster.ports[$0]!)}"
        }
        try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}\n").utf8)
            .write(to: URL(fileURLWithPath: cluster.file))
        let three = try CachetMembership(contentsOfFile: cluster.file)
        for id in ["n1", "n2", "n3"] { kill(cluster.node(id).process.processIdentifier, SIGHUP) }
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let hashes = try ["n1", "n2", "n3"].map { try cluster.stats($0)["cluster_hash"] as? String }
            if hashes.allSatisfy({ $0 == three.membershipHashText }) { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        Thread.sleep(forTimeInterval: 0.5)
        let n1 = try cluster.node("n1").connect()
        var hits = 0
        for key in keys where try NodeForwardingTests.get(key, from: n1).body == Array("v3".utf8) { hits += 1 }
        #expect(hits == keys.count, "\(hits) of \(keys.count) keys of the removed member hit")
        let warmed = try ["n1", "n2", "n3"].map { try cluster.stats($0)["warm_up_hits"] as? Int ?? 0 }.reduce(0, +)
        #expect(warmed == keys.count, "warm_up_hits \(warmed)")
    }

    /// A previous owner whose memory tier no longer holds a key (evicted, kept in its disk tier) answers the
    /// warm-up from its disk tier: every moved key hits, the evicted ones included.
    @Test func aPreviousOwnerAnswersTheWarmUpFromItsDiskTier() throws {
        let cluster = try Cluster(extraArguments: ["--probe-interval", "0.1", "--memory-limit", "2MiB"], disk: true)
        // About 3 MiB of values per member through 2 MiB memory tiers: the first written leave memory.
        let keys = (0..<150).map { "spill:\($0)" }
        let value = { (key: String) in Array(key.utf8) + [UInt8](repeating: 0x2a, count: 64 << 10) }
        let n1 = try cluster.node("n1").connect()
        for key in keys {
            #expect(try n1.roundTrip(.put(key: Array(key.utf8), value: value(key), ttl: 0)).status == .ok)
        }
        let evictions = try ["n1", "n2", "n3"].map { try cluster.stats($0)["evictions"] as? Int ?? 0 }
        #expect(evictions.allSatisfy { $0 > 0 }, "every member's memory tier evicted: \(evictions)")
        let four = try Self.addN4(to: cluster)
        let moved = keys.filter { four.owner(of: $0).id == "n4" }
        #expect(moved.count > 20, "\(moved.count) keys moved to n4")
        Thread.sleep(forTimeInterval: 0.5)
        var hits = 0
        for key in moved where try NodeForwardingTests.get(key, from: n1).body == value(key) { hits += 1 }
        #expect(hits == moved.count, "\(hits) of \(moved.count) moved keys hit")
    }

    /// A GET with the `lease` flag is not warmed up (`Protocol/PROTOCOL.md`, "Leases"): after n4 joins, a
    /// lease GET of a key that moved to it misses and is granted the key's lease (its caller loads the
    /// value), while a plain GET of another moved key is answered from the key's previous owner.
    @Test func aLeaseGetOfAKeyThatMovedIsGrantedALeaseInsteadOfAWarmUp() throws {
        let cluster = try Cluster(extraArguments: ["--probe-interval", "0.1", "--warm-up-seconds", "300"])
        let keys = (0..<200).map { "lease-warm:\($0)" }
        let n1 = try cluster.node("n1").connect()
        for key in keys {
            #expect(try n1.roundTrip(.put(key: Array(key.utf8), value: Array(key.utf8), ttl: 0)).status == .ok)
        }
        let four = try Self.addN4(to: cluster)
        let moved = keys.filter { four.owner(of: $0).id == "n4" }
        #expect(moved.count > 20, "\(moved.count) keys moved to n4")
        Thread.sleep(forTimeInterval: 0.5)
        let leased = try NodeForwardingTests.get(moved[0], from: n1, flags: .lease)
        #expect(leased.status == .notFound, "\(leased)")
        let reply = try #require(CachetLeaseReply(decoding: leased.body), "a lease reply: \(leased.body)")
        #expect(reply.token != 0, "the caller holds the key's lease")
        let warmed = try NodeForwardingTests.get(moved[1], from: n1)
        #expect(warmed.status == .ok && warmed.body == Array(moved[1].utf8), "a plain GET is warmed up: \(warmed)")
        #expect(try cluster.stats("n4")["warm_up_hits"] as? Int ?? 0 >= 1)
    }

    @Test func withoutWarmUpTheKeysThatMovedMiss() throws {
        let result = try Self.run(warmUpSeconds: 0)
        #expect(result.hits == 0, "\(result.hits) of \(result.of) moved keys hit")
        #expect(result.written && result.deleted)
    }
}
