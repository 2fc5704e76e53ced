import CachetCluster
import CachetRing
import CachetTestSupport
import Testing

@Suite("CachetMembership")
struct CachetMembershipTests {
    static func membership(_ text: String) throws -> CachetMembership {
        try CachetMembership(json: Array(text.utf8))
    }

    /// The error a document gives, or a failed expectation when it gives none.
    static func error(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> CachetClusterError? {
        do {
            let membership = try membership(text)
            Issue.record("expected an error, got \(membership)", sourceLocation: sourceLocation)
            return nil
        } catch let error as CachetClusterError {
            return error
        } catch {
            Issue.record("unexpected \(error)", sourceLocation: sourceLocation)
            return nil
        }
    }

    @Test func aFileWithIdsGivesItsMembersInIdOrder() throws {
        let membership = try Self.membership(
            """
            {"members": [
              {"id": "n2", "host": "127.0.0.1", "port": 7421},
              {"id": "n1", "host": "127.0.0.1", "port": 7420},
              {"id": "n3", "host": "cache-3.internal", "port": 7420}
            ]}
            """
        )
        #expect(membership.members.map(\.id) == ["n1", "n2", "n3"])
        #expect(membership.members[2] == CachetClusterMember(id: "n3", host: "cache-3.internal", port: 7420))
        #expect(membership.ring.members == ["n1", "n2", "n3"])
        #expect(membership.virtualNodesPerMember == CachetRing.defaultVirtualNodesPerMember)
        #expect(membership.member(id: "n2")?.port == 7421)
        #expect(membership.member(id: "n4") == nil)
        #expect(membership.index(ofID: "n3") == 2)
    }

    @Test func anIdLeftOutIsTheAddress() throws {
        let membership = try Self.membership(
            #"{"members": [{"host": "127.0.0.1", "port": 7421}, {"host": "127.0.0.1", "port": 7420}]}"#
        )
        #expect(membership.members.map(\.id) == ["127.0.0.1:7420", "127.0.0.1:7421"])
        // The same ring as the one RING.md's members named by address make.
        #expect(membership.ring == (try CachetRing(members: ["127.0.0.1:7420", "127.0.0.1:7421"])))
        #expect(CachetClusterMember(host: "10.0.0.1", port: 7420).id == "10.0.0.1:7420")
    }

    @Test func theRingPlacesMembersByIdSoAMovedNodeKeepsItsKeys() throws {
        let before = try CachetMembership(members: [
            CachetClusterMember(id: "a", host: "10.0.0.1", port: 7420),
            CachetClusterMember(id: "b", host: "10.0.0.2", port: 7420),
            CachetClusterMember(id: "c", host: "10.0.0.3", port: 7420),
        ])
        let after = try CachetMembership(members: [
            CachetClusterMember(id: "a", host: "10.0.0.1", port: 7420),
            CachetClusterMember(id: "b", host: "10.0.9.9", port: 9000),
            CachetClusterMember(id: "c", host: "10.0.0.3", port: 7420),
        ])
        #expect(before.ring == after.ring)
        #expect(before.membershipHash != after.membershipHash)
        for index in 0..<2000 {
            let key = "key:\(index)"
            #expect(before.owner(of: key).id == after.owner(of: key).id)
        }
        #expect(after.owner(of: Array("key:1".utf8)).id == after.ring.members[after.ring.owner(of: "key:1")])
        let list = after.preferenceList(for: Array("key:1".utf8), count: 3)
        #expect(list.map(\.id) == after.ring.preferenceList(for: "key:1", count: 3).map { after.ring.members[$0] })
        let changes = after.changes(since: before)
        #expect(changes.moved == [CachetClusterMember(id: "b", host: "10.0.9.9", port: 9000)])
        #expect(changes.added.isEmpty && changes.removed.isEmpty && !changes.virtualNodeCountChanged)
    }

    @Test func theOrderOfTheFileDoesNotMatter() throws {
        let one = try Self.membership(
            #"{"members": [{"id": "x", "host": "h1", "port": 1}, {"id": "y", "host": "h2", "port": 2}]}"#
        )
        let two = try Self.membership(
            #"{"virtual_nodes_per_member": 160, "members": [{"port": 2, "host": "h2", "id": "y"}, {"host": "h1", "id": "x", "port": 1}]}"#
        )
        #expect(one == two && one.hashValue == two.hashValue && one.membershipHash == two.membershipHash)
        #expect(one.canonicalText == two.canonicalText)
    }

    @Test func theHashCoversIdsHostsPortsAndTheVirtualNodeCount() throws {
        let base = [
            CachetClusterMember(id: "n1", host: "127.0.0.1", port: 7420),
            CachetClusterMember(id: "n2", host: "127.0.0.1", port: 7421),
        ]
        let reference = try CachetMembership(members: base)
        #expect(
            reference.canonicalText
                == "cachet-membership 1\nvirtual_nodes_per_member 160\nmember n1 127.0.0.1 7420\nmember n2 127.0.0.1 7421\n"
        )
        #expect(reference.membershipHashText.count == 16)
        #expect(UInt64(reference.membershipHashText, radix: 16) == reference.membershipHash)
        let expected = Array(reference.canonicalText.utf8).withUnsafeBytes { CachetRing.hash($0) }
        #expect(reference.membershipHash == expected)

        var variants: [CachetMembership] = []
        var renamed = base
        renamed[1].id = "n3"
        variants.append(try CachetMembership(members: renamed))
        var rehosted = base
        rehosted[1].host = "127.0.0.2"
        variants.append(try CachetMembership(members: rehosted))
        var reported = base
        reported[1].port = 7422
        variants.append(try CachetMembership(members: reported))
        variants.append(try CachetMembership(members: base, virtualNodesPerMember: 100))
        variants.append(try CachetMembership(members: Array(base.prefix(1))))
        for variant in variants {
            #expect(variant.membershipHash != reference.membershipHash, "\(variant)")
            #expect(variant != reference)
        }
    }

    @Test func settingTheMembersRebuildsTheRingAndTheHash() throws {
        var membership = try CachetMembership(members: [CachetClusterMember(id: "b", host: "h", port: 1)])
        let before = membership.membershipHash
        membership.members.append(CachetClusterMember(id: "a", host: "h", port: 2))
        #expect(membership.members.map(\.id) == ["a", "b"])
        #expect(membership.ring.members == ["a", "b"])
        #expect(membership.membershipHash != before)
        #expect(membership == (try CachetMembership(members: membership.members.reversed())))
    }

    @Test func changesListWhatWasAddedRemovedAndMoved() throws {
        let old = try CachetMembership(members: [
            CachetClusterMember(id: "a", host: "h", port: 1),
            CachetClusterMember(id: "b", host: "h", port: 2),
            CachetClusterMember(id: "c", host: "h", port: 3),
        ])
        let new = try CachetMembership(
            members: [
                CachetClusterMember(id: "b", host: "h", port: 2),
                CachetClusterMember(id: "c", host: "h2", port: 3),
                CachetClusterMember(id: "d", host: "h", port: 4),
            ],
            virtualNodesPerMember: 10
        )
        let changes = new.changes(since: old)
        #expect(changes.added.map(\.id) == ["d"])
        #expect(changes.removed.map(\.id) == ["a"])
        #expect(changes.moved.map(\.description) == ["c@h2:3"])
        #expect(changes.virtualNodeCountChanged)
        #expect(new.changes(since: new).isEmpty)
        #expect(new.changes(since: new).description == "no changes")
        #expect(changes.description == "added d@h:4; removed a@h:1; moved c@h2:3; virtual node count changed")
    }

    @Test func requireMemberNamesTheIdsThereAre() throws {
        let membership = try Self.membership(#"{"members": [{"id": "n1", "host": "h", "port": 1}]}"#)
        #expect(try membership.requireMember(id: "n1").host == "h")
        #expect(throws: CachetClusterError.self) { try membership.requireMember(id: "n9") }
        do {
            _ = try membership.requireMember(id: "n9")
        } catch {
            #expect(error.code == .unknownMember)
            #expect(error.message.contains("\"n9\"") && error.message.contains("\"n1\""))
        }
    }
}
