import CachetCluster
import CachetTestSupport
import Testing

@testable import CachetNode

/// The minority rule's count as the node keeps it (``MinorityRule``), without sockets.
@Suite("Minority rule")
struct MinorityRuleTests {
    static func health(members: Int) throws -> CachetClusterHealth {
        let membership = try CachetMembership(
            members: (0..<members).map { CachetClusterMember(id: "n\($0)", host: "127.0.0.1", port: 7420 + $0) }
        )
        return try CachetClusterHealth(membership: membership, localID: "n0")
    }

    @Test func enteringTheMinorityIsCountedOnceAndForgetsWhichPeersAnswered() throws {
        var random = SplitMix64(state: 5)
        var health = try Self.health(members: 5)
        var rule = MinorityRule()
        for peer in 1...4 { _ = health.replied(peer, now: 1) }
        #expect(rule.recount(&health) == nil, "every peer is up: nothing changes")
        // Two peers refuse: 3 of 5 reached, still a majority.
        _ = health.refused(1, now: 2, using: &random)
        _ = health.refused(2, now: 2, using: &random)
        #expect(rule.recount(&health) == nil && !rule.inMinority)
        #expect(health.hasAnswered(3), "answers are kept while the node has a majority")
        // A third: 2 of 5.
        _ = health.refused(3, now: 3, using: &random)
        let entered = rule.recount(&health)
        #expect(entered?.entered == true && entered?.reached == 2 && entered?.members == 5)
        #expect(rule.inMinority && rule.entries == 1)
        #expect(!health.hasAnswered(4), "what the node saw while cut off may be its own isolation")
        #expect(rule.recount(&health) == nil && rule.entries == 1, "counted once")
        // A peer answers again: 3 of 5.
        _ = health.replied(1, now: 4)
        let left = rule.recount(&health)
        #expect(left?.entered == false && left?.reached == 3)
        #expect(!rule.inMinority && rule.entries == 1)
    }
}
