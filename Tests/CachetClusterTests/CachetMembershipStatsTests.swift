import CachetCluster
import Testing

/// The membership a node reports in STATS (`CachetMembership(nodeStats:)`), read leniently: the other STATS
/// fields and each member's own view (`state`) are skipped; what cannot be a membership is refused with the
/// code and words below.
@Suite("Membership from a node's STATS")
struct CachetMembershipStatsTests {
    @Test func aMembershipIsReadAndTheNodesOwnViewSkipped() throws {
        let stats = #"""
            {"items": 3, "cluster_virtual_nodes": 64, "cluster_hash": "x", "cluster_members": [
              {"id": "n1", "host": "127.0.0.1", "port": 7420, "state": "up"},
              {"state": "down", "port": 7421, "host": "127.0.0.1", "id": "n2", "extra": [1, 2]}
            ]}
            """#
        let membership = try CachetMembership(nodeStats: Array(stats.utf8))
        #expect(membership.members.map(\.id) == ["n1", "n2"])
        #expect(membership.members.map(\.port) == [7420, 7421])
        #expect(membership.virtualNodesPerMember == 64)
    }

    @Test(arguments: [
        (
            #"{"cluster_members": [{"id": "n1", "host": "h", "port": 1}"#, CachetClusterError.Code.invalidJSON,
            "not valid JSON"
        ),
        ("[1]", .wrongType, "the reply holds"),
        (#"{"cluster_members": 3}"#, .wrongType, #""cluster_members" is"#),
        (#"{"items": 1}"#, .missingField, "not a member of a cluster"),
        (#"{"cluster_members": [7]}"#, .wrongType, "cluster_members[0] is"),
        (#"{"cluster_members": [{"host": "h", "port": 1}]}"#, .missingField, #"cluster_members[0] lacks its "id""#),
        // A port of another type is skipped, so it reads as missing (leniently).
        (#"{"cluster_members": [{"id": "n1", "host": "h", "port": "1"}]}"#, .missingField, "lacks its"),
    ])
    func whatCannotBeAMembershipIsRefused(text: String, code: CachetClusterError.Code, words: String) {
        do {
            _ = try CachetMembership(nodeStats: Array(text.utf8))
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.code == code, "\(text): \(error.message)")
            #expect(error.message.contains(words), "\(text): \(error.message)")
            #expect(error.message.hasPrefix("a node's STATS"), "\(error.message)")
        }
    }
}
