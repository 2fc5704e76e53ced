import CachetCluster
import CachetTestSupport
import CachetWire
import Foundation
import Testing

@testable import CachetNode

/// A peer's answer to a returning owner's hold check, as ``NodeHealth`` gives it (`Protocol/CLUSTER.md`,
/// "The owner's hold"), without sockets: clear only for a member it routes to and owes nothing, and a write
/// placed for that member before the answer and recorded after it is refused, never recorded behind the
/// owner's back.
@Suite("Hold and view checks")
struct HoldCheckTests {
    /// A NodeHealth for n1 of the three-member cluster n1, n2, n3, and the membership's hash.
    static func health() throws -> (NodeHealth, String) {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/cluster.json"
        let members = (1...3).map { #"{"id": "n\#($0)", "host": "127.0.0.1", "port": \#(7420 + $0)}"# }
        let text = #"{"members": [\#(members.joined(separator: ", "))]}"#
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        var configuration = CachetNodeConfiguration()
        try configuration.joinCluster(file: file, nodeID: "n1", host: nil, port: nil)
        let membership = CachetNodeMembership(configuration: configuration)
        return (NodeHealth(membership: membership), membership.current.membershipHashText)
    }

    static func down(_ id: String, in health: NodeHealth) {
        health.record(.unavailable("refused", .refused), from: CachetClusterMember(id: id, host: "127.0.0.1", port: 1))
    }

    @Test func aPeerClearsOnlyAMemberItRoutesToAndOwesNothing() throws {
        let (health, hash) = try Self.health()
        #expect(health.holdCheck(CachetHoldCheck(memberID: "n2", membershipHash: hash)) == .clear)
        #expect(health.holdCheck(CachetHoldCheck(memberID: "n2", membershipHash: "other")) == .otherMembership)
        #expect(health.holdCheck(CachetHoldCheck(memberID: "n9", membershipHash: hash)) == .otherMembership)
        #expect(health.holdCheck(CachetHoldCheck(memberID: "n1", membershipHash: hash)) == .otherMembership)

        Self.down("n3", in: health)
        #expect(health.holdCheck(CachetHoldCheck(memberID: "n3", membershipHash: hash)) == .notRoutedHere)
        #expect(health.recordWrite(Array("k".utf8), ownerID: "n3", clearancesBefore: health.clearancesGiven) == nil)
        // n3 answers again: this node now owes it the write it took.
        health.record(.answered(status: .ok, body: []), from: CachetClusterMember(id: "n3", host: "127.0.0.1", port: 1))
        #expect(health.holdCheck(CachetHoldCheck(memberID: "n3", membershipHash: hash)) == .owesInvalidations)
    }

    @Test func aPeerSaysWhetherItStillRoutesToAMember() throws {
        let (health, _) = try Self.health()
        #expect(health.viewCheck(CachetViewCheck(memberID: "n2")) == .routesThere)
        Self.down("n2", in: health)
        #expect(health.viewCheck(CachetViewCheck(memberID: "n2")) == .down)
        #expect(health.viewCheck(CachetViewCheck(memberID: "n1")) == .unknown, "itself")
        #expect(health.viewCheck(CachetViewCheck(memberID: "n7")) == .unknown)
        #expect(health.viewChecksDue().isEmpty, "down by a refused connection: nothing to ask")
    }

    @Test func aWritePlacedBeforeTheOwnerWasClearedIsRefused() throws {
        let (health, hash) = try Self.health()
        Self.down("n2", in: health)
        // A write of n2's key is placed while n2 is down here...
        let before = health.clearancesGiven
        // ...n2 comes back and is cleared before the write is recorded.
        health.record(.answered(status: .ok, body: []), from: CachetClusterMember(id: "n2", host: "127.0.0.1", port: 1))
        #expect(health.holdCheck(CachetHoldCheck(memberID: "n2", membershipHash: hash)) == .clear)
        let refusal = health.recordWrite(Array("k".utf8), ownerID: "n2", clearancesBefore: before)
        #expect(refusal?.status == .unavailable, "\(String(describing: refusal))")
        #expect(health.holdCheck(CachetHoldCheck(memberID: "n2", membershipHash: hash)) == .clear, "nothing recorded")
        // Placed after the clearance, and for an owner that went down since, a write is recorded as usual.
        Self.down("n2", in: health)
        #expect(health.recordWrite(Array("k".utf8), ownerID: "n2", clearancesBefore: before) == nil)
    }
}
