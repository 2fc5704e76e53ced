import CachetTestSupport
import CachetWire
import Dispatch
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A returning owner's hold ends as soon as every peer has cleared it (`Protocol/CLUSTER.md`, "The owner's
/// hold"): each routes the owner's keys to it and owes it nothing. Its keys are then served from its own
/// tiers seconds before the hold period would have ended, and never an older value.
@Suite("Node: a returning owner's hold ends once every peer clears it", .dedicatedThreads)
struct NodeHoldReleaseTests {
    typealias Cluster = NodeForwardingTests.Cluster

    /// Probes every 0.1 s, forwards time out after 0.3 s, and a hold period of 30 s: any hold that ends
    /// within the test ended because the peers cleared it.
    static let timings = ["--probe-interval", "0.1", "--forward-timeout", "0.3", "--hold-period", "30"]

    /// The owner stopped (SIGTERM) while a stand-in takes a newer value of one of its keys, then started
    /// again on its data directory: it serves its other keys from its disk tier within seconds (not after
    /// 30 s), and the key the stand-in took only in its newer value, through every member. With the peers'
    /// answer given without looking at the stand-in log, the owner serves the older value (checked by hand).
    @Test func anOwnerRestartedWhileItsPeersAreUpServesItsKeysOnceTheyClearIt() throws {
        let cluster = try Cluster(extraArguments: Self.timings, disk: true)
        let replaced = cluster.key(ownedBy: "n1", prefix: "replaced")
        let kept = cluster.key(ownedBy: "n1", prefix: "kept")
        let n1 = try cluster.node("n1").connect()
        for key in [replaced, kept] {
            #expect(try n1.roundTrip(.put(key: Array(key.utf8), value: Array("v1".utf8), ttl: 0)).status == .ok)
        }
        #expect(cluster.node("n1").stop(signal: SIGTERM, timeout: 5) == 0)
        try NodeFailoverTests.waitForDown("n1", cluster: cluster)
        let n2 = try cluster.node("n2").connect()
        #expect(try n2.roundTrip(.put(key: Array(replaced.utf8), value: Array("v2".utf8), ttl: 0)).status == .ok)

        let started = Date()
        try cluster.start("n1")
        var seen: [[UInt8]] = []
        var servedAfter: Double?
        let sockets = try ["n1", "n2", "n3"].map { try cluster.node($0).connect() }
        while Date().timeIntervalSince(started) < 10 {
            for socket in sockets {
                let reply = try NodeForwardingTests.get(replaced, from: socket)
                if reply.status == .ok { seen.append(reply.body) }
            }
            let direct = try NodeForwardingTests.get(replaced, from: sockets[0], flags: .forwarded)
            if direct.status == .ok { seen.append(direct.body) }
            if servedAfter == nil, try NodeForwardingTests.get(kept, from: sockets[0]).status == .ok {
                servedAfter = Date().timeIntervalSince(started)
            }
            if servedAfter != nil && Date().timeIntervalSince(started) > (servedAfter ?? 0) + 1 { break }
            Thread.sleep(forTimeInterval: 0.02)
        }
        #expect(!seen.contains(Array("v1".utf8)), "the replaced value served after the owner's return")
        let released = try #require(servedAfter, "the owner's own key was not served within 10 s of its start")
        #expect(released < 10)
        let stats = try cluster.stats("n1")
        #expect(stats["holding"] as? Bool == false && stats["holds_released"] as? Int == 1, "\(stats)")
        #expect(cluster.node("n1").log.contains("every peer routes them here and owes it nothing"))
        for id in ["n1", "n2", "n3"] {
            let connection = try cluster.node(id).connect()
            #expect(try NodeForwardingTests.get(replaced, from: connection).body == Array("v2".utf8), "\(id)")
            #expect(try NodeForwardingTests.get(kept, from: connection).body == Array("v1".utf8), "\(id)")
        }
    }

    /// A peer that is down cannot clear the hold (it may owe the owner a word on a key): the returning owner
    /// holds on, and misses its keys, for as long as that peer is away.
    @Test func anOwnerHoldsWhileAPeerIsDown() throws {
        let cluster = try Cluster(extraArguments: Self.timings, disk: true)
        let key = cluster.key(ownedBy: "n1")
        #expect(
            try cluster.node("n1").connect().roundTrip(.put(key: Array(key.utf8), value: Array("v1".utf8), ttl: 0))
                .status == .ok
        )
        _ = cluster.node("n3").stop(signal: SIGKILL)
        #expect(cluster.node("n1").stop(signal: SIGTERM, timeout: 5) == 0)
        try cluster.start("n1")
        Thread.sleep(forTimeInterval: 2)
        let stats = try cluster.stats("n1")
        #expect(stats["holding"] as? Bool == true && stats["holds_released"] as? Int == 0, "\(stats)")
        let held = try NodeForwardingTests.get(key, from: try cluster.node("n1").connect(), flags: .forwarded)
        #expect(held.status == .notFound, "the owner still holds")
    }

    /// A peer's answer to a hold check, over a real socket: clear for a member it routes to and owes nothing,
    /// "another membership" for an id or hash it does not know, BAD_REQUEST for a malformed body.
    @Test func aPeerAnswersHoldChecks() throws {
        let cluster = try Cluster(extraArguments: Self.timings)
        let n2 = try cluster.node("n2").connect()
        let hash = try #require(cluster.stats("n2")["cluster_hash"] as? String)
        func ask(_ check: CachetHoldCheck) throws -> CachetResponse {
            try n2.send(check.encoded(id: 9))
            return try n2.readResponse()
        }
        let clear = try ask(CachetHoldCheck(memberID: "n1", membershipHash: hash))
        #expect(clear.status == .ok && clear.body == [CachetHoldCheck.Answer.clear.rawValue])
        let stranger = try ask(CachetHoldCheck(memberID: "n9", membershipHash: hash))
        #expect(stranger.body == [CachetHoldCheck.Answer.otherMembership.rawValue])
        let otherHash = try ask(CachetHoldCheck(memberID: "n1", membershipHash: "0000"))
        #expect(otherHash.body == [CachetHoldCheck.Answer.otherMembership.rawValue])
        var malformed: [UInt8] = []
        let flags: CachetRequestFlags = [.forwarded, .holdCheck]
        [UInt8(0), 9, 65].withUnsafeBytes {
            CachetFrameEncoder.appendFrame(
                header: CachetFrameHeader(opcode: .ping, word: flags.rawValue, id: 3),
                body: $0,
                to: &malformed
            )
        }
        try n2.send(malformed)
        #expect(try n2.readResponse().status == .badRequest)
        #expect(try n2.roundTrip(.ping).status == .ok, "the connection stays usable")
    }
}
