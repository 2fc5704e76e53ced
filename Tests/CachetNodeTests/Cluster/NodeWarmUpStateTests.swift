import CachetCluster
import CachetTestSupport
import Foundation
import Logging
import Testing

@testable import CachetNode

/// When a node warms a key from its previous owner (``NodeWarmUp``), without sockets: the window a change
/// opens, the gate of an agreeing previous owner and of a change seen at a peer, the writes noted since, and the limit that closes the window.
@Suite("Warm-up windows")
struct NodeWarmUpStateTests {
    static let logger = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    /// A node `id` of a cluster file listing `ids`, and the file's path.
    static func node(_ id: String, of ids: [String], in directory: TemporaryDirectory) throws -> (
        CachetNodeMembership, String
    ) {
        let file = directory.appending("cluster.json")
        try write(ids, to: file)
        var configuration = CachetNodeConfiguration()
        try configuration.joinCluster(file: file, nodeID: id, host: nil, port: nil)
        return (CachetNodeMembership(configuration: configuration), file)
    }

    static func write(_ ids: [String], to file: String) throws {
        let entries = ids.enumerated().map { index, id in
            "{\"id\": \"\(id)\", \"host\": \"127.0.0.1\", \"port\": \(17500 + index)}"
        }
        try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}").utf8).write(
            to: URL(fileURLWithPath: file)
        )
    }

    /// Every member but `id` seen reading `membership`'s current file.
    static func agree(_ comparison: MembershipComparison, _ membership: CachetNodeMembership, but id: String) {
        let peers = membership.current.members.filter { $0.id != id }
        comparison.setRoutable(peers)
        for peer in peers { comparison.record(membership.current.membershipHashText, of: peer, logger: logger) }
    }

    static func keys(_ count: Int, ownedBy id: String, in membership: CachetMembership) -> [[UInt8]] {
        Array((0...).lazy.map { Array("k\($0)".utf8) }.filter { membership.owner(of: $0).id == id }.prefix(count))
    }

    /// n4 of n1-n4, just started with nothing (joining), with a warm-up over 300 s: the pieces, a key n4 owns,
    /// and the membership before n4 was added.
    struct Joining {
        let directory: TemporaryDirectory
        let membership: CachetNodeMembership
        let comparison: MembershipComparison
        let warmUp: NodeWarmUp
        let key: [UInt8]
        let before: CachetMembership

        init() throws {
            directory = TemporaryDirectory(prefix: "cachet-warm-up")
            (membership, _) = try NodeWarmUpStateTests.node("n4", of: ["n1", "n2", "n3", "n4"], in: directory)
            comparison = MembershipComparison(membership: membership)
            warmUp = NodeWarmUp(
                membership: membership,
                comparison: comparison,
                window: 300,
                joining: true,
                learnsFromPeers: true
            )
            key = NodeWarmUpStateTests.keys(1, ownedBy: "n4", in: membership.current)[0]
            before = try CachetMembership(
                members: membership.current.members.filter { $0.id != "n4" },
                virtualNodesPerMember: membership.current.virtualNodesPerMember
            )
        }
    }

    @Test func aJoiningMemberWarmsOnceItSawAnotherMembershipAndThePreviousOwnerAgrees() throws {
        let joining = try Joining()
        let (membership, comparison, warmUp, key, before) = (
            joining.membership, joining.comparison, joining.warmUp, joining.key, joining.before
        )
        let source = { key.withUnsafeBytes { warmUp.source(for: $0) } }
        #expect(source() == nil, "a cluster that starts together asks no one")
        // A peer on the old file (the peers known routable by a first comparison), then every peer on this one.
        comparison.setRoutable(membership.current.members.filter { $0.id != "n4" })
        comparison.record(before.membershipHashText, of: membership.current.members[0], logger: Self.logger)
        #expect(source() == nil, "a peer disagrees")
        Self.agree(comparison, membership, but: "n4")
        #expect(source()?.id == before.owner(of: key).id)
        // A write here: never warmed, and a warm-up in flight is not kept.
        key.withUnsafeBytes { warmUp.noteWrite($0) }
        #expect(source() == nil)
        var stored = false
        #expect(!warmUp.keep(key) { stored = true } && !stored)
        let other = Self.keys(2, ownedBy: "n4", in: membership.current)[1]
        #expect(warmUp.keep(other) { stored = true } && stored)
        // A CLEAR closes the window.
        warmUp.noteClear()
        #expect(other.withUnsafeBytes { warmUp.source(for: $0) } == nil)
    }

    @Test func aJoiningMemberLearnsTheChangeFromAPeerThatAlreadyReloaded() throws {
        // The others reloaded before this member was ever compared with them (back to back, or before it
        // started): no peer is ever seen on the old file, but each reports its change from it.
        let joining = try Joining()
        let (membership, comparison, warmUp, key, before) = (
            joining.membership, joining.comparison, joining.warmUp, joining.key, joining.before
        )
        let source = before.owner(of: key)
        let ask = { key.withUnsafeBytes { warmUp.source(for: $0) } }
        let own = membership.current.membershipHashText
        // Agreeing peers that never changed (a cluster started together): no one is asked.
        Self.agree(comparison, membership, but: "n4")
        #expect(ask() == nil)
        // A peer that changed from another membership than the members but n4: still no one.
        comparison.record(own, previous: (hash: "0123", millisecondsAgo: 10), of: source, logger: Self.logger)
        #expect(ask() == nil)
        // The previous owner reports its change from the members but n4 to this membership.
        comparison.record(
            own,
            previous: (hash: before.membershipHashText, millisecondsAgo: 10),
            of: source,
            logger: Self.logger
        )
        #expect(ask()?.id == source.id)
        let sawDisagreement = comparison.sawDisagreement.load(ordering: .relaxed)
        #expect(!sawDisagreement)
        // Without a data directory, a start cannot be told from a restart that lost what it wrote since it
        // joined: the peers' report is not taken.
        let withoutDirectory = NodeWarmUp(membership: membership, comparison: comparison, window: 300, joining: true)
        #expect(key.withUnsafeBytes { withoutDirectory.source(for: $0) } == nil)
    }

    @Test func thePreviousOwnerIsAskedOnceItReadsThisMembershipWhateverTheOthersRead() throws {
        let joining = try Joining()
        let (membership, comparison, warmUp, key, before) = (
            joining.membership, joining.comparison, joining.warmUp, joining.key, joining.before
        )
        let source = before.owner(of: key)
        let other = try #require(before.members.first { $0.id != source.id })
        let ask = { key.withUnsafeBytes { warmUp.source(for: $0) } }
        // The previous owner and another peer still read the old file: the previous owner would take a write
        // of the key sent to it, so it is not asked.
        comparison.record(before.membershipHashText, of: other, logger: Self.logger)
        comparison.record(before.membershipHashText, of: source, logger: Self.logger)
        #expect(ask() == nil)
        // The previous owner reloaded; the other peer has not: asked (a write the other still sends it is
        // confirmed with n4 before it is acknowledged).
        comparison.record(membership.current.membershipHashText, of: source, logger: Self.logger)
        #expect(ask()?.id == source.id)
        #expect(comparison.disagreeingPeers == 1)
    }

    /// n1 of n1-n4, with a warm-up over `window` seconds, after n4 left the file (reloaded, every peer agreeing):
    /// the warm-up, the membership, and three keys that moved from n4 to n1.
    static func afterN4Left(window: Double, joining: Bool) throws -> (
        NodeWarmUp, CachetNodeMembership, [[UInt8]], CachetMembership, MembershipComparison, TemporaryDirectory
    ) {
        let directory = TemporaryDirectory(prefix: "cachet-warm-up")
        let (membership, file) = try node("n1", of: ["n1", "n2", "n3", "n4"], in: directory)
        let comparison = MembershipComparison(membership: membership)
        let warmUp = NodeWarmUp(membership: membership, comparison: comparison, window: window, joining: joining)
        let four = membership.current
        try write(["n1", "n2", "n3"], to: file)
        _ = membership.reload(logger: logger)
        agree(comparison, membership, but: "n1")
        let moved = Array(
            (0...).lazy.map { Array("m\($0)".utf8) }.filter {
                membership.current.owner(of: $0).id == "n1" && four.owner(of: $0).id == "n4"
            }.prefix(3)
        )
        return (warmUp, membership, moved, four, comparison, directory)
    }

    @Test func aReloadOpensAWindowThatAnUnchangedReloadKeepsAndItsLimitCloses() throws {
        // n4 leaves: its keys come to the others, n1 among them.
        let (warmUp, membership, moved, four, comparison, directory) = try Self.afterN4Left(window: 300, joining: false)
        defer { withExtendedLifetime(directory) {} }
        let stayed = Self.keys(1, ownedBy: "n1", in: four)[0]
        #expect(moved[0].withUnsafeBytes { warmUp.source(for: $0) }?.id == "n4")
        #expect(stayed.withUnsafeBytes { warmUp.source(for: $0) } == nil, "a key n1 owned before")
        // The same file again (read, and found unchanged): the window stays.
        #expect(membership.reload(logger: Self.logger)?.isEmpty == true)
        Self.agree(comparison, membership, but: "n1")
        #expect(moved[1].withUnsafeBytes { warmUp.source(for: $0) }?.id == "n4")
        // Past its limit of noted writes, the window closes.
        for index in 0...NodeWarmUp.maximumNoted {
            Array("w\(index)".utf8).withUnsafeBytes { warmUp.noteWrite($0) }
        }
        #expect(moved[2].withUnsafeBytes { warmUp.source(for: $0) } == nil)
    }

    @Test func noWindowWithWarmUpOff() throws {
        let (warmUp, _, moved, _, _, _) = try Self.afterN4Left(window: 0, joining: true)
        #expect(moved[0].withUnsafeBytes { warmUp.source(for: $0) } == nil)
    }
}
