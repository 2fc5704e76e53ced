import CachetCluster
import CachetRing
import CachetTestSupport
import Testing

@testable import CachetNode

/// Where a key goes (`Protocol/CLUSTER.md`, "Forwarding" and "Failover without stale reads"), decided from a
/// ``ClusterView`` alone: no node, no sockets, no lock. Each case drives a `CachetClusterHealth` as the
/// node's outcomes would, then asks ``Placement``.
@Suite("Placement from a view of the cluster")
struct PlacementTests {
    /// Five members n0 to n4; this node is `local`.
    static func health(local: String = "n0") throws -> CachetClusterHealth {
        let membership = try CachetMembership(
            members: (0..<5).map { CachetClusterMember(id: "n\($0)", host: "127.0.0.1", port: 7420 + $0) }
        )
        var health = try CachetClusterHealth(membership: membership, localID: local)
        for peer in health.membership.members.indices where peer != health.localIndex {
            _ = health.replied(peer, now: 1)
        }
        return health
    }

    /// A key's hash whose preference list starts with `first` then `second` (member indices).
    static func hash(first: Int, second: Int, in health: CachetClusterHealth) -> UInt64 {
        for candidate in 0..<100_000 {
            let hash = Array("key-\(candidate)".utf8).withUnsafeBytes { CachetRing.hash($0) }
            let list = health.membership.ring.preferenceList(forHash: hash, count: 2)
            if list == [first, second] { return hash }
        }
        Issue.record("no key found for \(first), \(second)")
        return 0
    }

    @Test func aKeyGoesToItsOwnerWhileItIsUpAndToItsStandInWhenItIsDown() throws {
        var random = SplitMix64(state: 3)
        var health = try Self.health()
        let owner = health.membership.members[2]
        // n2 owns the key, n3 is next: a peer's key goes to its owner.
        let byN3 = Self.hash(first: 2, second: 3, in: health)
        #expect(Placement.of(hash: byN3, owner: owner, in: ClusterView(health: health)) == .forward(owner))
        // The owner has not been told what this node wrote for it: a GET misses, a write goes to it.
        #expect(
            Placement.of(hash: byN3, owner: owner, in: ClusterView(health: health, ownerIsClean: false))
                == .delivering(owner: owner)
        )
        // n2 refuses: down; the key goes to n3, its stand-in.
        _ = health.refused(2, now: 2, using: &random)
        #expect(
            Placement.of(hash: byN3, owner: owner, in: ClusterView(health: health))
                == .forward(health.membership.members[3])
        )
        // When this node is next on the list, it stands in itself.
        let byThisNode = Self.hash(first: 2, second: 0, in: health)
        #expect(
            Placement.of(hash: byThisNode, owner: owner, in: ClusterView(health: health)) == .standIn(ownerID: "n2")
        )
    }

    @Test func inTheMinorityOrHoldingThisNodeDoesNotStandIn() throws {
        var random = SplitMix64(state: 4)
        var health = try Self.health()
        let owner = health.membership.members[2]
        _ = health.refused(2, now: 2, using: &random)
        let byThisNode = Self.hash(first: 2, second: 0, in: health)
        let view = ClusterView(health: health)
        #expect(Placement.of(hash: byThisNode, owner: owner, in: view, inMinority: true) == .minority)
        // A peer's forward in the minority too.
        let byN3 = Self.hash(first: 2, second: 3, in: health)
        #expect(Placement.of(hash: byN3, owner: owner, in: view, forwarded: true, inMinority: true) == .minority)
        // Holding after an absence, this node leaves the key to the next member after it.
        let deferred = Placement.of(hash: byThisNode, owner: owner, in: view) { true }
        guard case .deferred(let next) = deferred else {
            Issue.record("holding: \(deferred)")
            return
        }
        #expect(next.id != "n0" && next.id != "n2")
        // `holding` is asked only when it matters: not for a key forwarded to a routable owner.
        var asked = false
        _ = Placement.of(
            hash: Self.hash(first: 1, second: 3, in: health),
            owner: health.membership.members[1],
            in: view
        ) {
            asked = true
            return true
        }
        #expect(!asked)
    }

    @Test func aStandInOnAViewFormedWhileCutOffIsUnsettled() throws {
        var random = SplitMix64(state: 5)
        var health = try Self.health()
        let owner = health.membership.members[2]
        // Every peer times out until they are down: this node's view was formed while cut off.
        for round in 0..<20 {
            for peer in 1...4 { _ = health.timedOut(peer, now: UInt64(10 + round), using: &random) }
        }
        let byThisNode = Self.hash(first: 2, second: 0, in: health)
        // Down by timeouts alone, which no majority confirmed: the key still goes to its owner, where the
        // others may send it (a request there fails on its own if it is really gone).
        #expect(Placement.of(hash: byThisNode, owner: owner, in: ClusterView(health: health)) == .forward(owner))
        // Once this node counts itself cut off (it forgets what it saw), its view is not its own: unsettled.
        health.forgetAnswers()
        #expect(Placement.of(hash: byThisNode, owner: owner, in: ClusterView(health: health)) == .unsettled)
        // Confirmed down by a majority (the other peers say so, asked after it went down): this node stands in.
        var confirmed = try Self.health()
        for round in 0..<3 { _ = confirmed.timedOut(2, now: UInt64(10 + round), using: &random) }
        #expect(Placement.of(hash: byThisNode, owner: owner, in: ClusterView(health: confirmed)) == .forward(owner))
        // Another member's stand-in (n3, after n2) is not where the key goes while n2 is unconfirmed either.
        let byAnother = Self.hash(first: 2, second: 3, in: confirmed)
        #expect(Placement.of(hash: byAnother, owner: owner, in: ClusterView(health: confirmed)) == .forward(owner))
        for peer in [1, 3] { confirmed.recordView(of: 2, from: peer, routesThere: false, askedAt: 20) }
        #expect(
            Placement.of(hash: byAnother, owner: owner, in: ClusterView(health: confirmed))
                == .forward(confirmed.membership.members[3])
        )
        #expect(
            Placement.of(hash: byThisNode, owner: owner, in: ClusterView(health: confirmed))
                == .standIn(ownerID: owner.id)
        )
    }

    @Test func whileHoldingThisNodesOwnKeysGoToTheNextMemberThatAnswered() throws {
        var random = SplitMix64(state: 6)
        var health = try Self.health()
        let ownKey = Self.hash(first: 0, second: 3, in: health)
        #expect(Placement.standIn(forOwnKeyHash: ownKey, in: ClusterView(health: health))?.id == "n3")
        // n3 refuses: the next one after it.
        _ = health.refused(3, now: 2, using: &random)
        let next = Placement.standIn(forOwnKeyHash: ownKey, in: ClusterView(health: health))
        #expect(next != nil && next?.id != "n3" && next?.id != "n0")
    }
}
