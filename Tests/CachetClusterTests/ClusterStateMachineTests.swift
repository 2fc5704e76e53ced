import CachetCluster
import CachetRing
import CachetTestSupport
import Testing

/// The pure state machines of forwarding and failover, driven by random event sequences (seeded, so a
/// failure replays) and checked against simple models.
@Suite("Cluster state machines")
struct ClusterStateMachineTests {
    static let ms: UInt64 = 1_000_000
    static let configuration = CachetPeerHealth.Configuration(
        timeoutsBeforeDown: 3,
        initialBackoff: 100 * ms,
        maximumBackoff: 1600 * ms,
        holdPeriod: 5000 * ms
    )

    static func membership(_ count: Int) throws -> CachetMembership {
        try CachetMembership(
            members: (0..<count).map { CachetClusterMember(id: "n\($0)", host: "127.0.0.1", port: 7420 + $0) }
        )
    }

    // MARK: CachetPeerHealth

    @Test func aRefusedConnectionMarksDownAtOnceAndTimeoutsOnlyAfterThreeInARow() {
        var random = SplitMix64(state: 1)
        var peer = CachetPeerHealth(configuration: Self.configuration)
        let check1 = peer.timedOut(now: 0, using: &random) == .becameSuspect
        #expect(check1)
        let check2 = peer.timedOut(now: 1, using: &random) == .becameSuspect
        #expect(check2)
        #expect(peer.isRoutable && peer.state == .suspect(timeouts: 2))
        let check3 = peer.replied(now: 2) == nil && peer.state == .up
        #expect(check3)
        _ = peer.timedOut(now: 3, using: &random)
        _ = peer.timedOut(now: 4, using: &random)
        guard case .wentDown(let at) = peer.timedOut(now: 5, using: &random) else {
            Issue.record("three timeouts in a row must mark the peer down")
            return
        }
        #expect((5 + 50 * Self.ms)...(5 + 100 * Self.ms) ~= at)
        var other = CachetPeerHealth(configuration: Self.configuration)
        guard case .wentDown = other.refused(now: 0, using: &random) else {
            Issue.record("a refused connection must mark the peer down")
            return
        }
        #expect(other.isDown && other.probeAt != nil)
    }

    @Test func aPeerIsAssumedUpAtStartButHasNotAnsweredUntilItReplies() {
        var random = SplitMix64(state: 3)
        var peer = CachetPeerHealth(configuration: Self.configuration)
        #expect(peer.isRoutable && !peer.hasAnswered)
        _ = peer.timedOut(now: 0, using: &random)
        #expect(!peer.hasAnswered)
        _ = peer.replied(now: 1)
        #expect(peer.hasAnswered)
        _ = peer.refused(now: 2, using: &random)
        #expect(peer.isDown && peer.hasAnswered, "it answered once since the start")
    }

    /// After this node reached fewer than a majority (``CachetPeerHealth/forgetAnswer()``), a peer's state may
    /// be this node's own isolation until an answer, or a refused connection (a closed port), says otherwise;
    /// a timeout and a connection that failed once open (a reset, as after a partition heals) do not.
    @Test func aForgottenPeerStaysStaleUntilItAnswersOrRefuses() {
        var random = SplitMix64(state: 4)
        var peer = CachetPeerHealth(configuration: Self.configuration)
        _ = peer.replied(now: 0)
        #expect(!peer.isStaleSinceCut && peer.hasAnswered)
        peer.forgetAnswer()
        #expect(peer.isStaleSinceCut && !peer.hasAnswered)
        _ = peer.timedOut(now: 1, using: &random)
        _ = peer.refused(now: 2, certain: false, using: &random)
        #expect(peer.isStaleSinceCut, "a timeout or a reset proves nothing")
        _ = peer.refused(now: 3, using: &random)
        #expect(!peer.isStaleSinceCut && peer.isDown, "a closed port does")
        peer.forgetAnswer()
        _ = peer.replied(now: 4)
        #expect(!peer.isStaleSinceCut && peer.hasAnswered)
    }

    /// A peer down by timeouts is verified only once enough other peers, asked after it went down, say they
    /// see it down too that with this node they make a majority: timeouts may be this node's own (it is cut
    /// off, or its connection still stalls after a partition healed while the others reach the peer), and it
    /// must not stand in for a member the others still serve. Answers alone (the peers reach this node) are
    /// not enough. A refused connection needs nothing.
    @Test func aPeerDownByTimeoutsIsVerifiedByAMajorityThatSeesItDown() throws {
        var random = SplitMix64(state: 6)
        let members = (1...5).map { CachetClusterMember(id: "n\($0)", host: "127.0.0.1", port: 7420 + $0) }
        var health = try CachetClusterHealth(
            membership: try CachetMembership(members: members),
            localID: "n4",
            configuration: Self.configuration
        )
        for peer in [0, 1, 2, 4] { _ = health.replied(peer, now: 1) }
        for now in UInt64(10)...12 { _ = health.timedOut(0, now: now, using: &random) }
        #expect(health.state(of: 0) == .down)
        #expect(!health.isDownVerified(0) && health.unverifiedDownMembers == [0], "nobody confirmed it")
        _ = health.replied(1, now: 20)
        _ = health.replied(2, now: 21)
        #expect(!health.isDownVerified(0), "answers alone do not confirm it")
        health.recordView(of: 0, from: 1, routesThere: false, askedAt: 11)
        #expect(!health.isDownVerified(0), "asked before it went down here")
        health.recordView(of: 0, from: 1, routesThere: false, askedAt: 13)
        health.recordView(of: 0, from: 2, routesThere: true, askedAt: 13)
        #expect(!health.isDownVerified(0), "this node and one peer are not a majority of five")
        health.recordView(of: 0, from: 4, routesThere: false, askedAt: 14)
        #expect(health.isDownVerified(0) && health.unverifiedDownMembers.isEmpty, "three of five see it down")
        #expect(health.downByTimeoutsMembers == [0], "still asked about, so that a word can be withdrawn")
        health.recordView(of: 0, from: 4, routesThere: true, askedAt: 15)
        #expect(!health.isDownVerified(0), "a peer that routes there again withdraws its word")
        // Back up and down again: the confirmations were for the last time it went down.
        health.recordView(of: 0, from: 4, routesThere: false, askedAt: 16)
        _ = health.replied(0, now: 30)
        for now in UInt64(40)...42 { _ = health.timedOut(0, now: now, using: &random) }
        #expect(!health.isDownVerified(0), "confirmations of an earlier absence")
        _ = health.refused(4, now: 50, using: &random)
        #expect(health.isDownVerified(4), "a refused connection is certain")
        #expect(health.isDownVerified(1), "a member that is not down")
    }

    @Test func failedProbesDoubleTheBackoffUpToTheMaximumWithJitterInTheUpperHalf() {
        var random = SplitMix64(state: 2)
        var peer = CachetPeerHealth(configuration: Self.configuration)
        guard case .wentDown(var at) = peer.refused(now: 0, using: &random) else { return }
        var expected = 100 * Self.ms
        for _ in 0..<8 {
            let check4 = !peer.startProbeIfDue(now: at - 1)
            #expect(check4)
            let check5 = peer.startProbeIfDue(now: at)
            #expect(check5)
            let check6 = !peer.startProbeIfDue(now: at)
            #expect(check6, "one probe at a time")
            expected = min(expected * 2, 1600 * Self.ms)
            let now = at
            guard case .probeRescheduled(let next) = peer.refused(now: now, using: &random) else {
                Issue.record("a failed probe reschedules")
                return
            }
            #expect(peer.backoff == expected)
            #expect((now + expected / 2)...(now + expected) ~= next)
            at = next
        }
        let check7 = peer.startProbeIfDue(now: at)
        #expect(check7)
        let check8 = peer.replied(now: at) == .cameUp && peer.state == .up
        #expect(check8)
    }

    @Test func aQuickRelapseKeepsBackingOffAndAStableReturnForgetsIt() {
        var random = SplitMix64(state: 3)
        var peer = CachetPeerHealth(configuration: Self.configuration)
        _ = peer.refused(now: 0, using: &random)
        _ = peer.startProbeIfDue(now: 1_000 * Self.ms)
        let check9 = peer.replied(now: 1_000 * Self.ms) == .cameUp
        #expect(check9)
        // Relapse 1 s later, within the 5 s hold: the backoff doubles instead of restarting.
        _ = peer.refused(now: 2_000 * Self.ms, using: &random)
        #expect(peer.backoff == 200 * Self.ms)
        _ = peer.startProbeIfDue(now: 3_000 * Self.ms)
        _ = peer.replied(now: 3_000 * Self.ms)
        _ = peer.refused(now: 3_500 * Self.ms, using: &random)
        #expect(peer.backoff == 400 * Self.ms)
        _ = peer.startProbeIfDue(now: 4_000 * Self.ms)
        _ = peer.replied(now: 4_000 * Self.ms)
        // Up for longer than the hold: the next failure starts from the initial backoff.
        _ = peer.replied(now: 9_001 * Self.ms)
        _ = peer.refused(now: 9_002 * Self.ms, using: &random)
        #expect(peer.backoff == 100 * Self.ms)
    }

    @Test(arguments: 0..<20)
    func randomEventsKeepThePeerInvariants(seed: Int) {
        var random = SplitMix64(state: UInt64(seed))
        var peer = CachetPeerHealth(configuration: Self.configuration)
        var now: UInt64 = 0
        var consecutiveTimeouts = 0
        for _ in 0..<500 {
            now += UInt64.random(in: 0...(400 * Self.ms), using: &random)
            let wasDown = peer.isDown
            let wasProbing: Bool
            if case .down(_, true) = peer.state { wasProbing = true } else { wasProbing = false }
            switch Int.random(in: 0..<4, using: &random) {
            case 0:
                let transition = peer.replied(now: now)
                #expect(peer.state == .up)
                #expect((transition == .cameUp) == wasDown)
                consecutiveTimeouts = 0
            case 1:
                let transition = peer.timedOut(now: now, using: &random)
                if !wasDown {
                    consecutiveTimeouts += 1
                    #expect(peer.isDown == (consecutiveTimeouts >= 3))
                    if peer.isDown { consecutiveTimeouts = 0 }
                } else {
                    #expect(wasProbing == (transition != nil))
                }
            case 2:
                _ = peer.refused(now: now, using: &random)
                #expect(peer.isDown)
                consecutiveTimeouts = 0
            default:
                let started = peer.startProbeIfDue(now: now)
                if started { #expect(wasDown && !wasProbing) }
            }
            #expect(Self.configuration.initialBackoff...Self.configuration.maximumBackoff ~= peer.backoff)
            if let at = peer.probeAt { #expect(at > 0 && peer.isDown) }
        }
    }

    @Test func theSameSeedGivesTheSameProbeTimes() {
        func run(_ seed: UInt64) -> [CachetPeerHealth.Transition?] {
            var random = SplitMix64(state: seed)
            var peer = CachetPeerHealth(configuration: Self.configuration)
            return (0..<20).map { step in
                _ = peer.startProbeIfDue(now: UInt64(step) * 2_000 * Self.ms)
                return peer.refused(now: UInt64(step) * 2_000 * Self.ms, using: &random)
            }
        }
        #expect(run(7) == run(7))
        #expect(run(7) != run(8))
    }

    // MARK: CachetClusterHealth

    @Test(arguments: [2, 3, 5])
    func randomFailuresNeverMarkEveryPeerDownAndRoutesFollowThePreferenceList(members: Int) throws {
        let membership = try Self.membership(members)
        var random = SplitMix64(state: UInt64(members))
        var health = try CachetClusterHealth(membership: membership, localID: "n0", configuration: Self.configuration)
        var now: UInt64 = 0
        let keys = (0..<16).map { Array("key-\($0)".utf8) }
        for _ in 0..<1_000 {
            now += UInt64.random(in: 0...(300 * Self.ms), using: &random)
            let member = Int.random(in: 0..<members, using: &random)
            switch Int.random(in: 0..<4, using: &random) {
            case 0: _ = health.replied(member, now: now)
            case 1: _ = health.timedOut(member, now: now, using: &random)
            case 2: _ = health.refused(member, now: now, using: &random)
            default:
                for due in health.startDueProbes(now: now) where Bool.random(using: &random) {
                    _ = health.replied(due, now: now)
                }
            }
            let peers = (1..<members)
            #expect(peers.contains { health.isRoutable($0) }, "at least one peer is never marked down")
            #expect(health.state(of: 0) == .local)
            for key in keys {
                let route = key.withUnsafeBytes { health.route($0) }
                let list = membership.ring.preferenceList(for: key, count: members)
                #expect(route.owner == list[0])
                let expected = list.first { health.isRoutable($0) }!
                #expect(route.target == expected)
            }
        }
    }

    @Test func keysOfAnOwnerNotYetCleanStayWithTheStandIn() throws {
        let membership = try Self.membership(3)
        let health = try CachetClusterHealth(membership: membership, localID: "n0")
        var log = CachetStandInLog()
        let key = (0..<1_000).map { Array("k\($0)".utf8) }.first { membership.ring.owner(of: $0) == 1 }!
        let hash = key.withUnsafeBytes { CachetRing.hash($0) }
        #expect(health.route(hash: hash, standIns: log).target == 1)
        _ = log.recordWrite(key, owner: "n1", ownerRoutable: true)
        #expect(health.route(hash: hash, standIns: log) == .init(owner: 1, target: 0))
        _ = log.delivered(.delete(key: key), owner: "n1")
        #expect(health.route(hash: hash, standIns: log).target == 1)
    }

    @Test func aNodeWhosePeersAllFailIsCutOffUntilOneAnswers() throws {
        var random = SplitMix64(state: 9)
        var health = try CachetClusterHealth(membership: try Self.membership(3), localID: "n1")
        #expect(!health.isCutOff)
        _ = health.refused(0, now: 0, using: &random)
        #expect(!health.isCutOff && health.state(of: 0) == .down)
        let held = health.refused(2, now: 0, using: &random)
        #expect(held == .heldSuspect && health.state(of: 2) == .suspect && health.isCutOff)
        _ = health.replied(2, now: 1)
        #expect(!health.isCutOff)
        let alone = try CachetClusterHealth(membership: try Self.membership(1), localID: "n0")
        #expect(!alone.isCutOff && alone.route(hash: 42).target == 0)
    }

    /// The minority rule's count: itself and every peer that is up, against members / 2 + 1. A suspect peer
    /// does not count (the last peer not down is held suspect, never marked down).
    @Test(arguments: [1, 2, 3, 4, 5])
    func aNodeIsInTheMinorityWhileItReachesFewerThanAMajority(members: Int) throws {
        var random = SplitMix64(state: UInt64(members))
        var health = try CachetClusterHealth(membership: try Self.membership(members), localID: "n0")
        let majority = members / 2 + 1
        #expect(health.majority == majority)
        #expect(health.reachedMembers == members && !health.isInMinority, "every peer starts up")
        // Peers fail one by one, by timeouts (suspect first) or refusals (down; the last one held suspect).
        for peer in 1..<max(members, 1) {
            if peer % 2 == 1 {
                _ = health.timedOut(peer, now: UInt64(peer), using: &random)
                #expect(health.state(of: peer) == .suspect)
            } else {
                _ = health.refused(peer, now: UInt64(peer), using: &random)
            }
            let reached = members - peer
            #expect(health.reachedMembers == reached, "\(peer) of \(members - 1) peers failed")
            #expect(health.isInMinority == (reached < majority), "\(reached) of \(members) reached")
        }
        // Alone: in the minority unless it is a cluster of one.
        #expect(health.reachedMembers == 1 && health.isInMinority == (members > 1))
        // Peers answer again, one by one, until a majority is reached.
        for peer in 1..<max(members, 1) {
            _ = health.replied(peer, now: 100)
            #expect(health.isInMinority == (1 + peer < majority))
        }
        #expect(!health.isInMinority)
    }

    @Test func anUnknownLocalIDIsRefused() throws {
        #expect(throws: CachetClusterError.self) {
            _ = try CachetClusterHealth(membership: try Self.membership(3), localID: "n9")
        }
    }

    // MARK: CachetStandInLog

    /// One owner, one stand-in with this node's view: writes go to the owner while it is up and clean,
    /// to the stand-in otherwise; a GET reads where the routing says, and may miss but never return a
    /// value other than the last one written.
    @Test(arguments: 0..<30)
    func noGetReturnsAnOlderValueThroughOwnerDownReturnAndDelivery(seed: Int) {
        var random = SplitMix64(state: UInt64(seed) &* 7919)
        var log = CachetStandInLog(limits: .init(maximumKeys: seed % 3 == 0 ? 3 : 64, maximumBytes: 4096))
        let keys = (0..<8).map { [UInt8(ascii: "k"), UInt8($0)] }
        var latest: [[UInt8]: Int] = [:]
        var ownerStore: [[UInt8]: Int] = [:]
        var standInStore: [[UInt8]: Int] = [:]
        var ownerUp = true
        var toDeliver: [CachetStandInLog.Invalidation] = []
        var version = 0
        for _ in 0..<600 {
            let key = keys.randomElement(using: &random)!
            switch Int.random(in: 0..<10, using: &random) {
            case 0...3:
                version += 1
                let value: Int? = Bool.random(using: &random) ? version : nil
                latest[key] = value
                if ownerUp && log.phase(of: "A") == .clean {
                    ownerStore[key] = value
                } else {
                    toDeliver += log.recordWrite(key, owner: "A", ownerRoutable: ownerUp)
                    standInStore[key] = value
                }
            case 4...6:
                let read: Int?
                if ownerUp && log.phase(of: "A") == .clean {
                    read = ownerStore[key]
                } else {
                    read = log.mayServeLocally(key, owner: "A") ? standInStore[key] : nil
                }
                if let read { #expect(read == latest[key], "stale read of \(key)") }
            case 7:
                if ownerUp {
                    ownerUp = false
                    log.ownerWentDown("A")
                    toDeliver = []
                } else {
                    ownerUp = true
                    toDeliver += log.ownerReturned("A")
                }
            default:
                guard ownerUp, !toDeliver.isEmpty else { continue }
                let invalidation = toDeliver.remove(at: Int.random(in: 0..<toDeliver.count, using: &random))
                switch invalidation {
                case .delete(let key): ownerStore[key] = nil
                case .clear: ownerStore = [:]
                }
                let outcome = log.delivered(invalidation, owner: "A")
                if outcome.clean {
                    #expect(log.phase(of: "A") == .clean)
                    #expect(log.outstanding(for: "A").isEmpty)
                    toDeliver = []
                }
            }
            #expect(Set(toDeliver) == log.outstanding(for: "A") || !ownerUp)
        }
    }

    @Test func overflowDeliversOneClearAndServesOnlyRememberedKeys() {
        var log = CachetStandInLog(limits: .init(maximumKeys: 2, maximumBytes: 1 << 20))
        for byte in UInt8(0)..<3 { #expect(log.recordWrite([byte], owner: "A", ownerRoutable: false).isEmpty) }
        #expect(log.phase(of: "A") == .standingIn)
        #expect(log.mayServeLocally([0], owner: "A") && log.mayServeLocally([1], owner: "A"))
        #expect(!log.mayServeLocally([2], owner: "A"))
        #expect(!log.mayServeLocally([0], owner: "B"))
        let check10 = log.ownerReturned("A") == [.clear]
        #expect(check10)
        #expect(log.phase(of: "A") == .delivering)
        let outcome = log.delivered(.clear, owner: "A")
        #expect(outcome.clean && Set(outcome.dropLocally) == [[0], [1]])
        #expect(log.phase(of: "A") == .clean && log.ownersNotClean.isEmpty)
    }

    @Test func aWriteForAnOwnerSeenUpIsDeliveredAtOnce() {
        var log = CachetStandInLog()
        let check11 = log.recordWrite([7], owner: "A", ownerRoutable: true) == [.delete(key: [7])]
        #expect(check11)
        #expect(log.phase(of: "A") == .delivering && log.mayServeLocally([7], owner: "A"))
        let check12 = log.recordWrite([7], owner: "A", ownerRoutable: true).isEmpty
        #expect(check12, "one DEL outstanding is enough")
        let check13 = log.recordWrite([8], owner: "A", ownerRoutable: true) == [.delete(key: [8])]
        #expect(check13)
        let check14 = !log.delivered(.delete(key: [7]), owner: "A").clean
        #expect(check14)
        let check15 = log.delivered(.delete(key: [8]), owner: "A").clean
        #expect(check15)
    }

    /// As the model above, with the stand-in's process dying now and then: what it wrote for the owner
    /// survives only as the records a node keeps in its stand-in file (each ``CachetStandInLog/addition(forWrite:owner:)``
    /// written before the write is answered, the owner's records dropped once it is clean), and its
    /// restarted log is ``CachetStandInLog/restore(owner:keys:overflowed:)`` of them. Its store keeps every
    /// value (a disk tier), older ones included. No GET returns a value other than the last one written.
    @Test(arguments: 0..<30)
    func aStandInRestartedFromItsRecordsNeverLetsAnOlderValueBack(seed: Int) {
        var random = SplitMix64(state: UInt64(seed) &* 104_729)
        let limits = CachetStandInLog.Limits(maximumKeys: seed % 3 == 0 ? 3 : 64, maximumBytes: 4096)
        var log = CachetStandInLog(limits: limits)
        let keys = (0..<8).map { [UInt8(ascii: "k"), UInt8($0)] }
        var latest: [[UInt8]: Int] = [:]
        var ownerStore: [[UInt8]: Int] = [:]
        var standInStore: [[UInt8]: Int] = [:]
        var file: (keys: Set<[UInt8]>, overflowed: Bool)? = nil
        var ownerUp = true
        var toDeliver: [CachetStandInLog.Invalidation] = []
        var version = 0
        var restarts = 0
        for _ in 0..<800 {
            let key = keys.randomElement(using: &random)!
            switch Int.random(in: 0..<11, using: &random) {
            case 0...3:
                version += 1
                let value: Int? = Bool.random(using: &random) ? version : nil
                latest[key] = value
                if ownerUp && log.phase(of: "A") == .clean {
                    ownerStore[key] = value
                } else {
                    switch log.addition(forWrite: key, owner: "A") {
                    case .key: file = (keys: (file?.keys ?? []).union([key]), overflowed: file?.overflowed ?? false)
                    case .overflow: file = (keys: file?.keys ?? [], overflowed: true)
                    case nil: break
                    }
                    toDeliver += log.recordWrite(key, owner: "A", ownerRoutable: ownerUp)
                    standInStore[key] = value
                }
            case 4...6:
                let read: Int?
                if ownerUp && log.phase(of: "A") == .clean {
                    read = ownerStore[key]
                } else {
                    read = log.mayServeLocally(key, owner: "A") ? standInStore[key] : nil
                }
                if let read { #expect(read == latest[key], "stale read of \(key)") }
            case 7:
                if ownerUp {
                    ownerUp = false
                    log.ownerWentDown("A")
                    toDeliver = []
                } else {
                    ownerUp = true
                    toDeliver += log.ownerReturned("A")
                }
            case 8:
                // The stand-in dies and starts again from its file; the owner, if up, answers its first probe.
                restarts += 1
                log = CachetStandInLog(limits: limits)
                if let file { log.restore(owner: "A", keys: file.keys, overflowed: file.overflowed) }
                #expect(log.phase(of: "A") == (file == nil ? .clean : .standingIn))
                toDeliver = ownerUp ? log.ownerReturned("A") : []
            default:
                guard ownerUp, !toDeliver.isEmpty else { continue }
                let invalidation = toDeliver.remove(at: Int.random(in: 0..<toDeliver.count, using: &random))
                switch invalidation {
                case .delete(let key): ownerStore[key] = nil
                case .clear: ownerStore = [:]
                }
                if log.delivered(invalidation, owner: "A").clean {
                    file = nil
                    toDeliver = []
                }
            }
        }
        #expect(restarts > 0)
    }

    /// A second stand-in's copies: once another member came back (and may have taken newer writes where this
    /// node stood in), none is served until written here again, and every one is still delivered.
    /// Invalidations go out in the order the writes were acknowledged, a key's last write counting, not in
    /// the keys' order; a CLEAR goes alone.
    @Test func invalidationsAreHandedOutInTheOrderTheWritesWereAcknowledged() {
        var log = CachetStandInLog()
        for key: UInt8 in [9, 3, 7, 1] { _ = log.recordWrite([key], owner: "A", ownerRoutable: false) }
        _ = log.recordWrite([3], owner: "A", ownerRoutable: false)
        let expected: [CachetStandInLog.Invalidation] = [[9], [7], [1], [3]].map { .delete(key: $0) }
        #expect(log.ownerReturned("A") == expected)
        #expect(log.outstandingInOrder(for: "A") == expected)
        var full = CachetStandInLog(limits: .init(maximumKeys: 2))
        for key: UInt8 in [5, 6, 4] { _ = full.recordWrite([key], owner: "A", ownerRoutable: false) }
        #expect(full.ownerReturned("A") == [.clear])
    }

    @Test func keysWrittenBeforeAnotherMemberReturnedAreDeliveredButNotServedUntilWrittenAgain() {
        var log = CachetStandInLog()
        _ = log.recordWrite([1], owner: "A", ownerRoutable: false)
        _ = log.recordWrite([2], owner: "A", ownerRoutable: false)
        _ = log.recordWrite([3], owner: "B", ownerRoutable: false)
        #expect(log.mayServeLocally([1], owner: "A") && log.mayServeLocally([3], owner: "B"))
        log.memberReturned()
        #expect(!log.mayServeLocally([1], owner: "A") && !log.mayServeLocally([2], owner: "A"))
        #expect(!log.mayServeLocally([3], owner: "B"))
        _ = log.recordWrite([2], owner: "A", ownerRoutable: false)
        #expect(log.mayServeLocally([2], owner: "A") && !log.mayServeLocally([1], owner: "A"))
        #expect(Set(log.ownerReturned("A")) == [.delete(key: [1]), .delete(key: [2])])
        #expect(log.ownerReturned("B") == [.delete(key: [3])])
    }

    /// A write the owner took itself while it holds, after this node dropped its copy, is newer than any
    /// this node recorded for the key: the owner is owed no word on it, and is clean when it was the last;
    /// a write recorded here later records the key again; an overflowed log keeps its CLEAR.
    @Test func aWriteTheOwnerTookItselfEndsTheWordsOwedOnItsKey() {
        var log = CachetStandInLog()
        _ = log.recordWrite([1], owner: "A", ownerRoutable: false)
        _ = log.recordWrite([2], owner: "A", ownerRoutable: false)
        #expect(Set(log.ownerReturned("A")) == [.delete(key: [1]), .delete(key: [2])])
        let first = log.ownerTookWrite([1], owner: "A")
        #expect(!first)
        #expect(log.outstanding(for: "A") == [.delete(key: [2])])
        #expect(!log.mayServeLocally([1], owner: "A"))
        let unknown = log.ownerTookWrite([3], owner: "A")
        #expect(!unknown, "a key never recorded changes nothing")
        let last = log.ownerTookWrite([2], owner: "A")
        #expect(last, "the last word owed: clean")
        #expect(log.phase(of: "A") == .clean)
        _ = log.recordWrite([2], owner: "A", ownerRoutable: false)
        #expect(log.phase(of: "A") == .standingIn)
        #expect(log.ownerReturned("A") == [.delete(key: [2])])
        var full = CachetStandInLog(limits: .init(maximumKeys: 1))
        for key: UInt8 in [5, 6] { _ = full.recordWrite([key], owner: "A", ownerRoutable: false) }
        let overflowed = full.ownerTookWrite([5], owner: "A")
        #expect(!overflowed)
        #expect(full.ownerReturned("A") == [.clear])
    }

    /// A write a peer sent while this node did not stand in (in its own view) is delivered but not served
    /// from here until written here as the stand-in.
    @Test func aWriteTakenOutsideTheStandInsOwnViewIsDeliveredButNotServed() {
        var log = CachetStandInLog()
        _ = log.recordWrite([1], owner: "A", ownerRoutable: false, servable: false)
        #expect(!log.mayServeLocally([1], owner: "A"))
        _ = log.recordWrite([1], owner: "A", ownerRoutable: false)
        #expect(log.mayServeLocally([1], owner: "A"))
        _ = log.recordWrite([1], owner: "A", ownerRoutable: false, servable: false)
        #expect(!log.mayServeLocally([1], owner: "A"))
        #expect(log.ownerReturned("A") == [.delete(key: [1])])
    }

    @Test func restoredKeysAreDeliveredButNotServedUntilWrittenAgain() {
        var log = CachetStandInLog(limits: .init(maximumKeys: 2, maximumBytes: 1 << 20))
        #expect(log.addition(forWrite: [1], owner: "A") == .key)
        log.restore(owner: "A", keys: [[1], [2]], overflowed: false)
        #expect(log.phase(of: "A") == .standingIn)
        #expect(!log.mayServeLocally([1], owner: "A") && !log.mayServeLocally([2], owner: "A"))
        #expect(log.addition(forWrite: [1], owner: "A") == nil, "already recorded")
        #expect(log.addition(forWrite: [3], owner: "A") == .overflow, "a third key overflows two")
        _ = log.recordWrite([1], owner: "A", ownerRoutable: false)
        #expect(log.mayServeLocally([1], owner: "A") && !log.mayServeLocally([2], owner: "A"))
        #expect(Set(log.ownerReturned("A")) == [.delete(key: [1]), .delete(key: [2])])
        #expect(!log.delivered(.delete(key: [1]), owner: "A").clean)
        let outcome = log.delivered(.delete(key: [2]), owner: "A")
        #expect(outcome.clean && Set(outcome.dropLocally) == [[1], [2]])

        // Nothing to restore changes nothing; an overflow alone makes a CLEAR.
        log.restore(owner: "B", keys: [], overflowed: false)
        #expect(log.phase(of: "B") == .clean)
        log.restore(owner: "B", keys: [], overflowed: true)
        #expect(log.phase(of: "B") == .standingIn && log.recorded(for: "B").overflowed)
        #expect(log.addition(forWrite: [9], owner: "B") == nil)
        #expect(log.ownerReturned("B") == [.clear])
        // More keys than the limits overflow.
        log.restore(owner: "C", keys: [[1], [2], [3]], overflowed: false)
        #expect(log.recorded(for: "C").overflowed && log.recorded(for: "C").keys.count == 2)
    }

    // MARK: CachetReturnHold

    @Test func aStartAStallAndRegainedContactHoldOwnedKeys() {
        var hold = CachetReturnHold(holdPeriod: 1_000, stallThreshold: 100, now: 0)
        #expect(hold.isHolding(now: 999) && !hold.isHolding(now: 1_000))
        var stalls = 0
        for now in stride(from: UInt64(50), through: 1_200, by: 50) where hold.tick(now: now) { stalls += 1 }
        #expect(stalls == 0, "ticks 50 ns apart are no stall")
        #expect(!hold.isHolding(now: 1_200))
        let stalled = hold.tick(now: 1_560)
        #expect(stalled, "a 360 ns gap is a stall")
        #expect(hold.isHolding(now: 2_559) && !hold.isHolding(now: 2_560))
        hold.regainedContact(now: 3_000)
        #expect(hold.isHolding(now: 3_999))
        let recommended = CachetReturnHold.recommendedHoldPeriod(
            health: CachetPeerHealth.Configuration(),
            forwardTimeout: 1_000_000_000
        )
        #expect(recommended == 11_000_000_000)
    }

    @Test func aHoldClearedByEveryPeerEndsOnlyIfNoOtherStartedSince() {
        var hold = CachetReturnHold(holdPeriod: 1_000, stallThreshold: 100, now: 0)
        let start = hold.holdStart
        let released = hold.release(startedAt: start, now: 40)
        #expect(released && !hold.isHolding(now: 40))
        let twice = hold.release(startedAt: start, now: 50)
        #expect(!twice, "no hold in force")
        hold.regainedContact(now: 300)
        let early = hold.release(startedAt: start, now: 350)
        #expect(!early && hold.isHolding(now: 350), "answers to checks sent before this hold started")
        let again = hold.holdStart
        let stalled = hold.tick(now: 600)
        #expect(stalled, "a stall during the checks")
        let afterStall = hold.release(startedAt: again, now: 600)
        #expect(!afterStall && hold.isHolding(now: 1_500))
        let last = hold.release(startedAt: hold.holdStart, now: 700)
        #expect(last && !hold.isHolding(now: 700))
    }

    @Test func aDownPeerThatReachesThisNodeIsProbedAtOnce() {
        var random = SplitMix64(state: 3)
        var peer = CachetPeerHealth(configuration: Self.configuration)
        guard case .wentDown(let at) = peer.refused(now: 0, using: &random) else { return }
        #expect(at > 10 && !peer.startProbeIfDue(now: 10))
        peer.probeNow(now: 10)
        let due = peer.probeAt == 10 && peer.startProbeIfDue(now: 10)
        #expect(due)
        peer.probeNow(now: 20)
        #expect(peer.probeAt == nil, "a probe already in flight is left alone")
        _ = peer.replied(now: 30)
        peer.probeNow(now: 40)
        #expect(peer.state == .up, "an up peer is left alone")
    }

    @Test func invalidationsWhileHoldingExtendTheHoldUpToItsBound() {
        // A hold of 1000 ns, a quiet period of 300 ns, at most 4000 ns from its start.
        var hold = CachetReturnHold(holdPeriod: 1_000, stallThreshold: 100, now: 0, quietPeriod: 300)
        #expect(hold.maximumHold == 4_000)
        // Early invalidations do not shorten the hold, nor extend it while it ends later anyway.
        #expect(!hold.invalidationReceived(now: 100) && hold.holdUntil == 1_000)
        // Near its end, each one moves the end to 300 ns after it.
        #expect(hold.invalidationReceived(now: 900) && hold.holdUntil == 1_200)
        #expect(hold.isHolding(now: 1_199) && !hold.isHolding(now: 1_200))
        #expect(hold.invalidationReceived(now: 1_150) && hold.holdUntil == 1_450)
        // A stream of invalidations, one every 200 ns: the hold lasts until the bound, then ends whatever
        // keeps arriving.
        var now: UInt64 = 1_150
        var extended = 0
        while now < 6_000 {
            now += 200
            if hold.invalidationReceived(now: now) { extended += 1 }
            #expect(hold.isHolding(now: now) == (now < 4_000), "at \(now)")
        }
        #expect(hold.holdUntil == 4_000 && extended == 13)
        // Quiet: the hold ends the quiet period after the last invalidation.
        var quiet = CachetReturnHold(holdPeriod: 1_000, stallThreshold: 100, now: 0, quietPeriod: 300)
        for at in stride(from: UInt64(800), through: 2_000, by: 100) { quiet.invalidationReceived(now: at) }
        #expect(quiet.isHolding(now: 2_299) && !quiet.isHolding(now: 2_300))
        // After the hold ended, an invalidation starts nothing.
        #expect(!quiet.invalidationReceived(now: 2_400) && !quiet.isHolding(now: 2_400))
        // A new hold (a stall) counts its bound from its own start.
        #expect(quiet.tick(now: 10_000) && quiet.holdStart == 10_000 && quiet.holdUntil == 11_000)
        for at in stride(from: UInt64(10_900), through: 20_000, by: 100) { quiet.invalidationReceived(now: at) }
        #expect(quiet.holdUntil == 14_000)
    }

    @Test func withoutAQuietPeriodOrWithoutAHoldNothingIsExtended() {
        var fixed = CachetReturnHold(holdPeriod: 1_000, stallThreshold: 100, now: 0)
        #expect(!fixed.invalidationReceived(now: 999) && fixed.holdUntil == 1_000)
        var empty = CachetReturnHold(
            holdPeriod: 1_000,
            stallThreshold: 100,
            now: 0,
            holdingAtStart: false,
            quietPeriod: 300
        )
        #expect(!empty.invalidationReceived(now: 10) && !empty.isHolding(now: 10))
        // A bound below the hold period is raised to it.
        let bounded = CachetReturnHold(
            holdPeriod: 1_000,
            stallThreshold: 100,
            now: 0,
            quietPeriod: 300,
            maximumHold: 10
        )
        #expect(bounded.maximumHold == 1_000)
        #expect(CachetReturnHold.recommendedQuietPeriod(forwardTimeout: 1_000, probeInterval: 500) == 1_500)
    }

    @Test(arguments: 0..<20)
    func theHoldEndsNoEarlierThanTheQuietPeriodAfterAnInvalidationAndNoLaterThanItsBound(seed: Int) {
        var random = SplitMix64(state: UInt64(seed) &+ 4_000)
        let period = UInt64.random(in: 100...2_000, using: &random)
        let quiet = UInt64.random(in: 1...1_000, using: &random)
        var hold = CachetReturnHold(holdPeriod: period, stallThreshold: 50, now: 0, quietPeriod: quiet)
        var now: UInt64 = 0
        var start: UInt64 = 0
        var lastInvalidation: UInt64?
        for _ in 0..<500 {
            now += UInt64.random(in: 0...40, using: &random)
            switch Int.random(in: 0..<20, using: &random) {
            case 0:
                now += 60  // a stall
                if hold.tick(now: now) {
                    start = now
                    lastInvalidation = nil
                }
            case 1:
                hold.regainedContact(now: now)
                start = now
                lastInvalidation = nil
            case 2...8:
                if hold.isHolding(now: now) { lastInvalidation = now }
                hold.invalidationReceived(now: now)
            default:
                // Ticks may find a stall too: the other events do not tick.
                if hold.tick(now: now) {
                    start = now
                    lastInvalidation = nil
                }
            }
            #expect(hold.holdUntil <= max(start + 4 * period, start + period))
            if let lastInvalidation {
                #expect(hold.holdUntil >= min(lastInvalidation + quiet, start + 4 * period))
            }
            if now < start + period { #expect(hold.isHolding(now: now)) }
        }
    }

    // MARK: CachetSingleflight

    @Test(arguments: 0..<10)
    func everyWaiterIsAnsweredOnceAndOneRequestGoesUpPerFlight(seed: Int) {
        var random = SplitMix64(state: UInt64(seed) + 100)
        var table = CachetSingleflight<Int, Int>(maximumFlights: 4, maximumWaiters: 3)
        var inAir: [UInt64: [Int]] = [:]
        var answered: [Int] = []
        var alone: [Int] = []
        var current: [Int: UInt64] = [:]
        for waiter in 0..<1_000 {
            let key = Int.random(in: 0..<6, using: &random)
            switch Int.random(in: 0..<5, using: &random) {
            case 0...2:
                switch table.join(key, waiter: waiter) {
                case .leader(let flight):
                    #expect(current[key] == nil && inAir[flight] == nil)
                    #expect(table.flight(for: key) == flight)
                    inAir[flight] = [waiter]
                    current[key] = flight
                case .joined(let flight):
                    #expect(current[key] == flight)
                    inAir[flight]!.append(waiter)
                case .full:
                    alone.append(waiter)
                }
            case 3:
                guard let flight = inAir.keys.randomElement(using: &random) else { continue }
                let waiters = table.complete(flight)
                #expect(waiters == inAir.removeValue(forKey: flight))
                answered += waiters
                for (key, value) in current where value == flight { current[key] = nil }
                let check18 = table.complete(flight).isEmpty
                #expect(check18)
            default:
                table.detach(key)
                current[key] = nil
            }
            #expect(table.flightCount == inAir.count && inAir.count <= 4)
            #expect(table.flight(for: key) == current[key])
            #expect(inAir.values.allSatisfy { $0.count <= 3 })
        }
        for flight in inAir.keys { answered += table.complete(flight) }
        let all = answered + alone
        #expect(Set(all).count == all.count, "no waiter is answered twice")
    }

    // MARK: CachetReplyOrder

    @Test(arguments: 0..<10)
    func repliesLeaveInRequestOrderWhateverOrderTheyComplete(seed: Int) {
        var random = SplitMix64(state: UInt64(seed) + 200)
        var order = CachetReplyOrder<Int>()
        var open: [(CachetReplyOrder<Int>.Slot, Int)] = []
        var released: [Int] = []
        var next = 0
        for _ in 0..<2_000 {
            if open.isEmpty || Int.random(in: 0..<3, using: &random) == 0 {
                open.append((order.reserve(), next))
                next += 1
            } else {
                let (slot, value) = open.remove(at: Int.random(in: 0..<open.count, using: &random))
                released += order.fill(slot, with: value)
                let check19 = order.fill(slot, with: -1).isEmpty
                #expect(check19, "a slot is filled once")
            }
            #expect(released == Array(0..<released.count))
            #expect(order.pendingCount == next - released.count)
        }
        for (slot, value) in open.shuffled(using: &random) { released += order.fill(slot, with: value) }
        #expect(released == Array(0..<next) && order.pendingCount == 0)
    }
}
