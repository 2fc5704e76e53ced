import CachetCluster
import CachetLocking
import CachetRing
import CachetWire
import Dispatch
import Logging
import Synchronization

/// The cluster's state as this node keeps it, for its loops: three collaborators under one lock, because
/// routing reads them at once and an outcome may change all three together.
/// - the peers' health (``PeerHealthState``): fed by the outcome of every forward and of the PING probes
///   (``PeerForwarder``), read by forwarding (a peer marked down is answered UNAVAILABLE at once, not
///   tried), by the cluster-wide fan-out and by STATS; a membership change (SIGHUP) starts every peer over
///   as up;
/// - the quorum (``MinorityRule``): whether this node reaches fewer than a majority of the members,
///   recounted only when a peer starts or stops being up, and told to the hold (``NodeReturnHold``);
/// - the stand-in ledger (``StandInLedger``): what this node owes the members it stood in for, and its file.
///
/// Routing reads a ``ClusterView`` copied under the lock, and ``Placement`` decides from it alone. Which
/// peers read another cluster file is kept apart (``membershipComparison``, its own lock).
///
/// Thread-safe: one lock around the state; taken once per forward outcome and per routing decision of a
/// forward, never on a request this node serves itself.
final class NodeHealth: Sendable {
    struct State {
        /// The peers' health.
        var peers = PeerHealthState()
        /// Whether this node reaches fewer than a majority of the members, as last counted.
        var minority = MinorityRule()
        /// What this node owes the members it stood in for.
        var ledger: StandInLedger
    }

    private let membership: CachetNodeMembership
    /// Which peers read another cluster file (its own lock).
    let membershipComparison: MembershipComparison
    private let configuration: CachetPeerHealth.Configuration
    private let state: CachetLock<State>
    /// Told after every outcome whether every peer has failed, when a peer answers after every peer had
    /// failed, and whether this node is in the minority when a peer's state changes.
    private let hold: NodeReturnHold?
    /// How long a returning owner holds: a delivery that takes longer is overdue (logged, counted).
    private let holdPeriod: UInt64
    private let logger: Logger?
    /// How many times this node told a returning owner that it owes it nothing (``holdCheck(_:)``): a
    /// routing decision reads it before it places a write, and ``recordWrite(_:ownerID:servable:clearancesBefore:)``
    /// compares.
    private let clearances = Atomic<UInt64>(0)

    /// - Parameters:
    ///   - membership: the node's membership, whose changes reset the view.
    ///   - configuration: thresholds and probe backoffs.
    ///   - hold: the node's hold, started again when contact returns after every peer had failed.
    ///   - standIns: the stand-in ledger to start from (read back from its file, ``StandInLedger/open(directory:membership:limits:logger:)``).
    init(
        membership: CachetNodeMembership,
        configuration: CachetPeerHealth.Configuration = .init(),
        hold: NodeReturnHold? = nil,
        holdPeriod: UInt64 = .max,
        logger: Logger? = nil,
        standIns: StandInLedger = StandInLedger()
    ) {
        self.membership = membership
        self.membershipComparison = MembershipComparison(membership: membership)
        self.configuration = configuration
        self.hold = hold
        self.holdPeriod = holdPeriod
        self.logger = logger
        state = CachetLock(State(ledger: standIns))
    }

    /// Whether requests may be sent to `member` (up or suspect, or this node).
    func isRoutable(_ member: CachetClusterMember) -> Bool {
        withHealth { health in
            guard let index = health.membership.index(ofID: member.id) else { return true }
            return health.isRoutable(index)
        } ?? true
    }

    /// Whether requests may be sent to `member`: it is routable, or down here by timeouts alone that no
    /// majority has confirmed (``CachetClusterHealth/isDownVerified(_:)``), where routing still sends a key
    /// the others send it (``Placement``).
    func mayForward(to member: CachetClusterMember) -> Bool {
        withHealth { health in
            guard let index = health.membership.index(ofID: member.id) else { return true }
            return health.isRoutable(index) || !health.isDownVerified(index)
        } ?? true
    }

    /// `member`'s state for STATS: `self`, `up`, `suspect`, `down`, or `unknown` for an id not in force.
    func state(ofID id: String) -> CachetClusterMemberState {
        withHealth { health in
            guard let index = health.membership.index(ofID: id) else { return .unknown }
            return health.state(of: index)
        } ?? .unknown
    }

    /// `member`'s state for STATS, and whether it has answered this node since it started or last reached
    /// fewer than a majority (STATS `answered`).
    func stateAndAnswer(ofID id: String) -> (state: CachetClusterMemberState, answered: Bool) {
        withHealth { health in
            guard let index = health.membership.index(ofID: id) else { return (.unknown, false) }
            return (health.state(of: index), health.hasAnswered(index))
        } ?? (.unknown, false)
    }

    /// Records the outcome of a forward or a probe to `member`. A member that comes back starts the
    /// delivery of what this node stood in for it (``invalidationsToSend()``); one that goes down while
    /// delivering goes back to standing in.
    func record(_ outcome: ForwardOutcome, from member: CachetClusterMember) {
        let now = DispatchTime.now().uptimeNanoseconds
        var change: MinorityRule.Change?
        var memberChange: CachetPeerHealth.Transition?
        let regained = withState { health, state -> Bool in
            state.peers.count(outcome, from: member.id)
            guard let index = health.membership.index(ofID: member.id) else { return false }
            let wasCutOff = health.isCutOff
            let wasUp = health.state(of: index) == .up
            let transition = PeerHealthState.apply(
                outcome,
                to: index,
                in: &health,
                now: now,
                random: &state.peers.random
            )
            if transition == .cameUp || (transition == .becameSuspect && wasUp) { memberChange = transition }
            if case .wentDown = transition { memberChange = transition }
            switch transition {
            case .wentDown:
                state.ledger.ownerWentDown(member.id)
            default:
                var answered = false
                if case .answered = outcome { answered = true }
                state.ledger.memberAnswered(
                    member.id,
                    cameUp: transition == .cameUp,
                    routable: answered && health.isRoutable(index),
                    now: now
                )
            }
            hold?.setCutOff(health.isCutOff)
            // The minority flag is cached: recounted only when a peer starts or stops being up.
            if wasUp != (health.state(of: index) == .up) { change = updateMinority(&health, &state) }
            return wasCutOff && !health.isCutOff
        }
        if let memberChange { log(memberChange, of: member, after: outcome) }
        if let change { log(change) }
        if regained == true { hold?.regainedContact() }
    }

    /// The member with id `id` said it is leaving the cluster: it is marked down at once, as by a refused
    /// connection, and the change is logged with that reason. Nothing happens for an id not in force, or
    /// this node's own.
    func memberLeaving(_ id: String) {
        guard
            let member = withHealth({ health -> CachetClusterMember? in
                guard let index = health.membership.index(ofID: id), index != health.localIndex else { return nil }
                return health.membership.members[index]
            }) ?? nil
        else { return }
        logger?.notice("a cluster member is leaving the cluster", metadata: ["cluster.member": "\(member.id)"])
        record(.unavailable("\(member.id) is leaving the cluster", .refused), from: member)
    }

    /// Whether this node reaches fewer than a majority of the members (STATS `in_minority`).
    var isInMinority: Bool { state.withLock { $0.minority.inMinority } }

    /// How often this node has entered the minority since start (STATS `minority_entries`).
    var minorityEntries: Int { state.withLock { $0.minority.entries } }

    /// Recounts the members this node reaches (``MinorityRule``) and, when it entered or left the minority,
    /// tells the hold (under this lock, so that the last word is the latest) and returns the change to log.
    private func updateMinority(_ health: inout CachetClusterHealth, _ state: inout State) -> MinorityRule.Change? {
        guard let change = state.minority.recount(&health) else { return nil }
        hold?.setInMinority(change.entered, reached: change.reached, members: change.members)
        return change
    }

    /// One line when a peer turns suspect, goes down or comes back in this node's view (not per request).
    private func log(
        _ change: CachetPeerHealth.Transition,
        of member: CachetClusterMember,
        after outcome: ForwardOutcome
    ) {
        var metadata: Logger.Metadata = ["cluster.member": "\(member.id)"]
        if case .unavailable(let reason, _) = outcome { metadata["error.message"] = "\(reason)" }
        if case .becameSuspect = change {
            logger?.info("a cluster member did not answer in time: suspect, still routed to", metadata: metadata)
        } else if case .cameUp = change {
            logger?.notice("a cluster member answers again: its keys go back to it", metadata: metadata)
        } else {
            logger?.warning(
                "a cluster member is down: its keys go to their stand-ins while it is probed",
                metadata: metadata
            )
        }
    }

    private func log(_ change: MinorityRule.Change) {
        change.log(to: logger, holdsOwnKeys: hold?.holdsInMinority == true)
    }

    // MARK: - Stand-ins (`Protocol/CLUSTER.md`, "Failover without stale reads")

    /// Whether a GET of `key`, which this node serves for `ownerID`, may return the local value: only a key
    /// it wrote in this episode (any other local copy may be older than the owner's).
    func mayServeLocally(_ key: [UInt8], ownerID: String) -> Bool {
        withState { _, state in state.ledger.mayServeLocally(key, owner: ownerID) } ?? false
    }

    /// Whether the local value of `key` may be handed back to `ownerID` with its delivery
    /// (``StandInLedger/mayHandBack(_:owner:)``).
    func mayHandBack(_ key: [UInt8], ownerID: String) -> Bool {
        withState { _, state in state.ledger.mayHandBack(key, owner: ownerID) } ?? false
    }

    /// Records a PUT or DEL of `key` served here for `ownerID`, before it is answered: in the stand-in
    /// file first when the log gains a key or overflows (nothing is written for a key already recorded).
    /// - Parameters:
    ///   - servable: whether this node takes the write as the stand-in in its own view (see
    ///     ``CachetStandInLog/recordWrite(_:owner:ownerRoutable:servable:)``).
    ///   - clearancesBefore: ``clearancesGiven`` read before the write was placed: when this node has
    ///   since told `ownerID` it owes it nothing (its hold may have ended on that word), the write is
    ///     refused instead of recorded (UNAVAILABLE: the owner serves the key again; sent again, it goes there).
    /// - Returns: nil, or the status and message the write must be refused with: SERVER_ERROR when the file
    ///   could not record it, UNAVAILABLE when the owner was cleared meanwhile.
    func recordWrite(
        _ key: [UInt8],
        ownerID: String,
        servable: Bool = true,
        clearancesBefore: UInt64 = .max
    ) -> (status: CachetStatus, message: String)? {
        withState { health, state -> (status: CachetStatus, message: String)? in
            if clearancesBefore != clearances.load(ordering: .relaxed), state.ledger.isCleared(ownerID) {
                return (
                    .unavailable,
                    "\(ownerID) came back while this node placed the write for it, and may serve the key "
                        + "again; send the write again"
                )
            }
            let routable = health.membership.index(ofID: ownerID).map { health.isRoutable($0) } ?? false
            return state.ledger.recordWrite(key, owner: ownerID, ownerRoutable: routable, servable: servable)
                .map { (.serverError, $0) }
        } ?? nil
    }

    /// How many times this node told a returning owner it owes it nothing; read before a write is placed and
    /// given to ``recordWrite(_:ownerID:servable:clearancesBefore:)``.
    var clearancesGiven: UInt64 { clearances.load(ordering: .relaxed) }

    /// A returning member asks whether its hold may end (a PING with `holdCheck`, `Protocol/CLUSTER.md`,
    /// "The owner's hold"): ``CachetHoldCheck/Answer/clear`` when this node reads the same membership, routes
    /// the member's keys to it, and owes it nothing (its stand-in log for it is clean). A member down here is
    /// probed at once, so that the next check finds it up. Decided under the lock, with the routing decisions.
    func holdCheck(_ check: CachetHoldCheck) -> CachetHoldCheck.Answer {
        let now = DispatchTime.now().uptimeNanoseconds
        return withState { health, state -> CachetHoldCheck.Answer in
            guard check.membershipHash == health.membership.membershipHashText,
                let index = health.membership.index(ofID: check.memberID), index != health.localIndex
            else {
                return .otherMembership
            }
            guard health.isRoutable(index) else {
                health.probeNow(index, now: now)
                return .notRoutedHere
            }
            guard state.ledger.clearHold(of: check.memberID) else { return .owesInvalidations }
            // Counted under the lock, after the mark: a write placed before this reads an older count.
            clearances.wrappingAdd(1, ordering: .relaxed)
            return .clear
        } ?? .otherMembership
    }

    /// A peer asks whether this node still routes to the member a view check names (a PING with `viewCheck`,
    /// `Protocol/CLUSTER.md`, "Health"): it marked that member down after its requests timed out, and stands
    /// in for it only once a majority of the members see it down.
    func viewCheck(_ check: CachetViewCheck) -> CachetViewCheck.Answer {
        withHealth { health -> CachetViewCheck.Answer in
            guard let index = health.membership.index(ofID: check.memberID), index != health.localIndex else {
                return .unknown
            }
            return health.isRoutable(index) ? .routesThere : .down
        } ?? .unknown
    }

    /// The members down here by timeouts, each with the peers to ask about it (every routable peer but it) and
    /// the time of asking (``PeerForwarder`` asks on its probe ticks): until a majority confirms one down, and
    /// after, so that a peer that sees it up again withdraws its word.
    func viewChecksDue() -> [(member: CachetClusterMember, peers: [CachetClusterMember], askedAt: UInt64)] {
        let now = DispatchTime.now().uptimeNanoseconds
        return withHealth { health in
            health.downByTimeoutsMembers.map { member in
                let peers = health.membership.members.indices.filter {
                    $0 != member && $0 != health.localIndex && health.isRoutable($0)
                }
                return (health.membership.members[member], peers.map { health.membership.members[$0] }, now)
            }
        } ?? []
    }

    /// `peer`'s answer to a view check about `member` sent at `askedAt` (``CachetClusterHealth/recordView(of:from:routesThere:askedAt:)``).
    func recordView(
        of member: CachetClusterMember,
        from peer: CachetClusterMember,
        answer: CachetViewCheck.Answer,
        askedAt: UInt64
    ) {
        withHealth { health in
            guard let index = health.membership.index(ofID: member.id),
                let peerIndex = health.membership.index(ofID: peer.id)
            else { return }
            health.recordView(of: index, from: peerIndex, routesThere: answer != .down, askedAt: askedAt)
        }
    }

    /// The start of the hold in force after an absence and the check to send every peer, when a hold check is
    /// due (``PeerForwarder`` asks on its probe ticks); nil when the node does not hold after an absence, or
    /// some peer is down in its view (that peer cannot answer, and may owe it invalidations).
    func holdCheckDue() -> (start: UInt64, check: CachetHoldCheck)? {
        guard let start = hold?.holdStartIfHolding() else { return nil }
        return withHealth { health -> (start: UInt64, check: CachetHoldCheck)? in
            let peers = health.membership.members.indices.filter { $0 != health.localIndex }
            guard !peers.isEmpty, peers.allSatisfy({ health.isRoutable($0) }) else { return nil }
            let id = health.membership.members[health.localIndex].id
            return (start, CachetHoldCheck(memberID: id, membershipHash: health.membership.membershipHashText))
        } ?? nil
    }

    /// Every peer answered ``CachetHoldCheck/Answer/clear`` to checks sent after the hold that started at
    /// `start`: that hold ends now, unless another began since (``NodeReturnHold/release(startedAt:peers:)``).
    func holdCleared(startedAt start: UInt64, peers: Int) {
        hold?.release(startedAt: start, peers: peers)
    }

    /// `ownerID` took a write of `key` itself while it holds, after this node dropped its copy: no word on the
    /// key is owed to it any more (``StandInLedger/ownerTookWrite(_:owner:)``).
    func ownerTookWrite(_ key: [UInt8], ownerID: String) {
        let failure = withState { _, state in state.ledger.ownerTookWrite(key, owner: ownerID) } ?? nil
        if let failure {
            logger?.warning(
                "the stand-in log file could not drop an owner's records: they are delivered again after a restart",
                metadata: ["cluster.member": "\(ownerID)", "error.message": "\(failure)"]
            )
        }
    }

    /// The invalidations to send now: those handed out for owners that are routable and not already on
    /// their way (sent again after a failure), each with its owner. Marked as on their way.
    func invalidationsToSend() -> [(owner: CachetClusterMember, invalidation: CachetStandInLog.Invalidation)] {
        let now = DispatchTime.now().uptimeNanoseconds
        let (due, late) =
            withState { health, state in
                state.ledger.invalidationsDue(now: now, holdPeriod: holdPeriod) { owner in
                    guard let index = health.membership.index(ofID: owner), health.isRoutable(index) else { return nil }
                    return health.membership.members[index]
                }
            } ?? ([], [])
        for ownerID in late {
            logger?.warning(
                "invalidations for a returned owner are overdue: it may serve values this node replaced until they arrive",
                metadata: ["cluster.member": "\(ownerID)"]
            )
        }
        return due
    }

    /// Deliveries to returned owners not finished within the hold period, since start.
    var overdueDeliveries: Int { state.withLock { $0.ledger.overdueDeliveries } }

    /// An invalidation's answer: acknowledged (OK, or NOT_FOUND for a DEL), or to be sent again.
    /// - Returns: the keys whose local copies may go once the owner is clean.
    func invalidationAnswered(
        _ invalidation: CachetStandInLog.Invalidation,
        ownerID: String,
        acknowledged: Bool
    ) -> [[UInt8]] {
        let (drop, failure) =
            withState { _, state in
                state.ledger.invalidationAnswered(invalidation, owner: ownerID, acknowledged: acknowledged)
            } ?? ([], nil)
        if let failure { logger?.warning("\(failure)", metadata: ["cluster.member": "\(ownerID)"]) }
        return drop
    }

    /// Whether every peer has failed (this node may be cut off from the cluster).
    var isCutOff: Bool { withHealth { $0.isCutOff } ?? false }

    /// The peers that are routable now (no side effect).
    func routablePeers() -> [CachetClusterMember] {
        withHealth { health in
            health.membership.members.indices.compactMap { index -> CachetClusterMember? in
                index != health.localIndex && health.isRoutable(index) ? health.membership.members[index] : nil
            }
        } ?? []
    }

    /// Every other member of the membership in force, whatever its state.
    func peers() -> [CachetClusterMember] {
        withHealth { health in
            health.membership.members.indices.compactMap { index -> CachetClusterMember? in
                index != health.localIndex ? health.membership.members[index] : nil
            }
        } ?? []
    }

    /// The members to probe now: every routable peer (an active check on the interval), and every down
    /// peer whose backoff has passed (marked as probing until its outcome is recorded).
    func membersToProbe() -> [CachetClusterMember] {
        let now = DispatchTime.now().uptimeNanoseconds
        return withHealth { health, _ in
            let due = Set(health.startDueProbes(now: now))
            return health.membership.members.indices.compactMap { index -> CachetClusterMember? in
                guard index != health.localIndex else { return nil }
                return due.contains(index) || health.isRoutable(index) ? health.membership.members[index] : nil
            }
        } ?? []
    }

    private func withHealth<T>(_ body: (inout CachetClusterHealth) -> T) -> T? {
        withState { health, _ in body(&health) }
    }

    private func withHealth<T>(_ body: (inout CachetClusterHealth, inout SystemRandomNumberGenerator) -> T) -> T? {
        withState { health, state in body(&health, &state.peers.random) }
    }

    /// Forwards and probes to each member, by outcome, since start (`/metrics`).
    var forwardOutcomes: [String: [String: Int]] { withState { _, state in state.peers.outcomes } ?? [:] }

    // MARK: - Placement (`Protocol/CLUSTER.md`, "Forwarding")

    /// The cluster as routing sees it for a key of `ownerID`, from the state under the lock.
    private static func view(of health: CachetClusterHealth, _ state: State, owner ownerID: String) -> ClusterView {
        ClusterView(health: health, ownerIsClean: state.ledger.log.phase(of: ownerID) == .clean)
    }

    /// Where a request for `key`, owned by `owner` (not this node), goes:
    /// ``Placement/of(hash:owner:in:forwarded:inMinority:holding:)`` on the view made under the lock, and
    /// decided there, so that `holding` is asked in the same state as before (to the owner while there is
    /// no membership yet).
    func place(
        _ key: UnsafeRawBufferPointer,
        owner: CachetClusterMember,
        forwarded: Bool = false,
        inMinority: Bool = false,
        holding: () -> Bool = { false }
    ) -> Placement {
        let hash = CachetRing.hash(key)
        return withState { health, state in
            Placement.of(
                hash: hash,
                owner: owner,
                in: Self.view(of: health, state, owner: owner.id),
                forwarded: forwarded,
                inMinority: inMinority,
                holding: holding
            )
        } ?? .forward(owner)
    }

    /// Where a request for one of this node's own keys goes while the node holds
    /// (``Placement/standIn(forOwnKeyHash:in:upOnly:)``).
    func standIn(forOwnKey key: UnsafeRawBufferPointer, upOnly: Bool = false) -> CachetClusterMember? {
        let hash = CachetRing.hash(key)
        return withState { health, _ in
            Placement.standIn(forOwnKeyHash: hash, in: ClusterView(health: health), upOnly: upOnly)
        } ?? nil
    }

    /// Runs `body` on the state under the lock, after bringing it up to date: the peers' health made anew
    /// for a new membership (the minority recounted with it), and the ledger told of an absence of this
    /// node that the hold counted since the last look (before anything reads or records the log).
    func withState<T>(_ body: (inout CachetClusterHealth, inout State) -> T) -> T? {
        let generation = membership.generation
        let snapshot: (nodeID: String, membership: CachetMembership)? =
            state.withLock { $0.peers.isCurrent(generation) } ? nil : membership.snapshot()
        var change: MinorityRule.Change?
        let result = state.withLockUnchecked { state -> T? in
            if state.peers.refresh(generation: generation, membership: snapshot, configuration: configuration) {
                // Every peer starts over as up: the minority is recounted with the new membership.
                if var health = state.peers.health {
                    change = updateMinority(&health, &state)
                    state.peers.health = health
                }
            }
            state.ledger.noteAbsences(hold?.absenceCount)
            guard var health = state.peers.health else { return nil }
            state.peers.health = nil
            defer { state.peers.health = health }
            return body(&health, &state)
        }
        if let change { log(change) }
        return result
    }
}
