import CachetCluster
import CachetLocking
import CachetRing
import CachetStore
import Dispatch
import Logging

/// The node's view of its peers' health (`Protocol/CLUSTER.md`, "Health"), and where a key goes because
/// of it, shared by its loops: fed by the outcome of every forward and of the PING probes
/// (``PeerForwarder``), read by routing (``place(_:owner:forwarded:inMinority:holding:)``), by forwarding (a
/// peer marked down is answered UNAVAILABLE at once, not tried), by the cluster-wide fan-out and by STATS.
/// The rules are `CachetClusterHealth`'s: refused → down at once, timeouts → suspect then down, probes with
/// backoff and jitter, flap damping, and never every peer down. A membership change (SIGHUP) starts every
/// peer over as up. It keeps whether this node reaches fewer than a majority of the members
/// (``MinorityRule``), recounted only when a peer starts or stops being up, and tells the hold
/// (``NodeReturnHold``).
///
/// Beside the peers' health, under the same lock because routing reads both at once, it keeps what this
/// node owes the members it stood in for (``StandInDuty``) and writes it to the stand-in log's file; which
/// peers read another cluster file is kept apart (``membershipComparison``, its own lock).
///
/// Thread-safe: one lock around the state; taken once per forward outcome and per routing decision of a
/// forward, never on a request this node serves itself.
final class NodeHealth: Sendable {
    struct State {
        var generation = -1
        var health: CachetClusterHealth?
        var random = SystemRandomNumberGenerator()
        /// What this node owes the members it stood in for.
        var duty = StandInDuty()
        /// Whether this node reaches fewer than a majority of the members, as last counted.
        var minority = MinorityRule()
        /// The hold's ``NodeReturnHold/absenceCount`` when the duty last took it into account.
        var absencesSeen: UInt64 = 0
        /// Forwards and probes to each member by outcome (`/metrics`), counted with the outcome's record.
        var outcomes: [String: [String: Int]] = [:]
    }

    private let membership: CachetNodeMembership
    /// Which peers read another cluster file (its own lock).
    let membershipComparison: MembershipComparison
    private let configuration: CachetPeerHealth.Configuration
    private let state = CachetLock(State())
    /// Told after every outcome whether every peer has failed, when a peer answers after every peer had
    /// failed, and whether this node is in the minority when a peer's state changes.
    private let hold: NodeReturnHold?
    /// How long a returning owner holds: a delivery that takes longer is overdue (logged, counted).
    private let holdPeriod: UInt64
    private let logger: Logger?
    /// Where the stand-in log is kept across a crash (a node with a data directory); nil keeps it in memory.
    private let standInFile: CachetStandInLogFile?

    /// - Parameters:
    ///   - membership: the node's membership, whose changes reset the view.
    ///   - configuration: thresholds and probe backoffs.
    ///   - hold: the node's hold, started again when contact returns after every peer had failed.
    ///   - standIns: the stand-in log to start from (read back from `standInFile`).
    ///   - standInFile: the file every addition to the log is written to before the write is answered.
    init(
        membership: CachetNodeMembership,
        configuration: CachetPeerHealth.Configuration = .init(),
        hold: NodeReturnHold? = nil,
        holdPeriod: UInt64 = .max,
        logger: Logger? = nil,
        standIns: CachetStandInLog = CachetStandInLog(),
        standInFile: CachetStandInLogFile? = nil
    ) {
        self.membership = membership
        self.membershipComparison = MembershipComparison(membership: membership)
        self.configuration = configuration
        self.hold = hold
        self.holdPeriod = holdPeriod
        self.logger = logger
        self.standInFile = standInFile
        state.withLock { $0.duty = StandInDuty(log: standIns) }
    }

    /// Whether requests may be sent to `member` (up or suspect, or this node).
    func isRoutable(_ member: CachetClusterMember) -> Bool {
        withHealth { health in
            guard let index = health.membership.index(ofID: member.id) else { return true }
            return health.isRoutable(index)
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
            state.outcomes[member.id, default: [:]][outcome.metricName, default: 0] += 1
            guard let index = health.membership.index(ofID: member.id) else { return false }
            let wasCutOff = health.isCutOff
            let wasUp = health.state(of: index) == .up
            let transition: CachetPeerHealth.Transition?
            switch outcome {
            case .answered:
                transition = health.replied(index, now: now)
            case .unavailable(_, .timedOut):
                transition = health.timedOut(index, now: now, using: &state.random)
            case .unavailable(_, .refused):
                transition = health.refused(index, now: now, using: &state.random)
            case .unavailable(_, .connectionFailed), .unavailable(_, .closed):
                transition = health.refused(index, now: now, certain: false, using: &state.random)
            case .unavailable(_, .overloaded) where !health.isRoutable(index):
                // A probe of a down peer that could not be sent: a failed probe, so that another is
                // scheduled (the peer would otherwise stay marked as being probed).
                transition = health.timedOut(index, now: now, using: &state.random)
            case .unavailable(_, .overloaded), .unavailable(_, .markedDown):
                transition = nil
            }
            if transition == .cameUp || (transition == .becameSuspect && wasUp) { memberChange = transition }
            if case .wentDown = transition { memberChange = transition }
            switch transition {
            case .wentDown:
                state.duty.ownerWentDown(member.id)
            default:
                var answered = false
                if case .answered = outcome { answered = true }
                state.duty.memberAnswered(
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

    // MARK: - Stand-ins (`Protocol/CLUSTER.md`, "Failover without stale reads"); where a key goes is in
    // NodeHealth+Placement.swift.

    /// Whether a GET of `key`, which this node serves for `ownerID`, may return the local value: only a key
    /// it wrote in this episode (any other local copy may be older than the owner's).
    func mayServeLocally(_ key: [UInt8], ownerID: String) -> Bool {
        withState { _, state in state.duty.mayServeLocally(key, owner: ownerID) } ?? false
    }

    /// Whether the local value of `key` may be handed back to `ownerID` with its delivery
    /// (``StandInDuty/mayHandBack(_:owner:)``).
    func mayHandBack(_ key: [UInt8], ownerID: String) -> Bool {
        withState { _, state in state.duty.mayHandBack(key, owner: ownerID) } ?? false
    }

    /// Records a PUT or DEL of `key` served here for `ownerID`, before it is answered: in the stand-in
    /// file first when the log gains a key or overflows (nothing is written for a key already recorded).
    /// - Parameter servable: whether this node takes the write as the stand-in in its own view (see
    ///   ``CachetStandInLog/recordWrite(_:owner:ownerRoutable:servable:)``).
    /// - Returns: nil, or why the file could not record it: the write must be refused (SERVER_ERROR).
    func recordWrite(_ key: [UInt8], ownerID: String, servable: Bool = true) -> String? {
        withState { health, state -> String? in
            var remember = true
            if let standInFile, let addition = state.duty.addition(forWrite: key, owner: ownerID) {
                // A file at its budget (part of --disk-limit) takes the owner's overflow instead of the key:
                // the owner then gets a CLEAR on its return, as when its log passes its limits.
                remember = addition == .key && standInFile.hasRoom(forKey: key, owner: ownerID)
                let record: CachetStandInLogFile.Record =
                    remember ? .key(owner: ownerID, key: key) : .overflowed(owner: ownerID)
                if let failure = standInFile.append(record) { return failure.message }
            }
            let routable = health.membership.index(ofID: ownerID).map { health.isRoutable($0) } ?? false
            state.duty.recordWrite(key, owner: ownerID, ownerRoutable: routable, servable: servable, remember: remember)
            return nil
        } ?? nil
    }

    /// The invalidations to send now: those handed out for owners that are routable and not already on
    /// their way (sent again after a failure), each with its owner. Marked as on their way.
    func invalidationsToSend() -> [(owner: CachetClusterMember, invalidation: CachetStandInLog.Invalidation)] {
        let now = DispatchTime.now().uptimeNanoseconds
        let (due, late) =
            withState { health, state in
                state.duty.invalidationsDue(now: now, holdPeriod: holdPeriod) { owner in
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
    var overdueDeliveries: Int { state.withLock { $0.duty.overdueDeliveries } }

    /// An invalidation's answer: acknowledged (OK, or NOT_FOUND for a DEL), or to be sent again.
    /// - Returns: the keys whose local copies may go once the owner is clean.
    func invalidationAnswered(
        _ invalidation: CachetStandInLog.Invalidation,
        ownerID: String,
        acknowledged: Bool
    ) -> [[UInt8]] {
        withState { _, state in
            let (drop, clean) = state.duty.invalidationAnswered(
                invalidation,
                owner: ownerID,
                acknowledged: acknowledged
            )
            if clean {
                let log = state.duty.log
                if let failure = standInFile?.ownerClean(ownerID, live: { Self.fileEntries(log) }) {
                    logger?.warning("\(failure.message)", metadata: ["cluster.member": "\(ownerID)"])
                }
            }
            return drop
        } ?? []
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
        withState { health, state in body(&health, &state.random) }
    }

    /// Forwards and probes to each member, by outcome, since start (`/metrics`).
    var forwardOutcomes: [String: [String: Int]] { withState { _, state in state.outcomes } ?? [:] }

    func withState<T>(_ body: (inout CachetClusterHealth, inout State) -> T) -> T? {
        let generation = membership.generation
        let snapshot: (nodeID: String, membership: CachetMembership)? =
            state.withLock { $0.generation == generation } ? nil : membership.snapshot()
        var change: MinorityRule.Change?
        let result = state.withLockUnchecked { state -> T? in
            if let snapshot, state.generation != generation {
                state.health = try? CachetClusterHealth(
                    membership: snapshot.membership,
                    localID: snapshot.nodeID,
                    configuration: configuration
                )
                state.generation = generation
                // Every peer starts over as up: the minority is recounted with the new membership.
                if var health = state.health {
                    change = updateMinority(&health, &state)
                    state.health = health
                }
            }
            // This node may have been away since the last look: its stand-in copies are not served again
            // until written again, before anything reads or records them.
            if let absences = hold?.absenceCount, absences != state.absencesSeen {
                state.absencesSeen = absences
                state.duty.thisNodeMayHaveBeenAway()
            }
            guard var health = state.health else { return nil }
            state.health = nil
            defer { state.health = health }
            return body(&health, &state)
        }
        if let change { log(change) }
        return result
    }
}
