import CachetCluster
import CachetStore
import Logging

/// What this node owes the members it stood in for (`Protocol/CLUSTER.md`, "Failover without stale
/// reads"), and its record on disk: the stand-in log (what it wrote for each owner, and whether it may serve
/// it), the invalidations on their way to returned owners, when each owner came back (to tell a delivery
/// that took longer than the owner's hold), and the log's file, written before a write it records is
/// answered. No clock and no lock: ``NodeHealth`` keeps it under its lock beside the peers' health, because
/// routing reads both at once (``ClusterView``).
///
/// The log's rules are `CachetStandInLog`'s (CachetCluster) and its file's format `CachetStandInLogFile`'s
/// (CachetStore); this is the node's one place for stand-ins.
struct StandInLedger {
    /// What this node served for owners it does not own, and what it must tell them.
    private(set) var log: CachetStandInLog
    /// The keys whose local values may be handed back to each returned owner (``mayHandBack(_:owner:)``).
    private var handBack: [String: Set<[UInt8]>] = [:]
    /// Invalidations sent and not answered yet, by owner id.
    private var delivering: [String: Set<CachetStandInLog.Invalidation>] = [:]
    /// When each owner being delivered to came back, and whether its delivery was found overdue.
    private var returnedAt: [String: (at: UInt64, overdue: Bool)] = [:]
    /// Deliveries not finished within the hold period, since start.
    private(set) var overdueDeliveries = 0
    /// Where the log is kept across a crash (a node with a data directory); nil keeps it in memory.
    let file: CachetStandInLogFile?
    /// The hold's ``NodeReturnHold/absenceCount`` when this ledger last took it into account.
    private var absencesSeen: UInt64 = 0
    /// The owners this node told, since each last went down here, that it owes them nothing
    /// (``clearHold(of:)``): a returning owner's hold may then end early.
    private var cleared: Set<String> = []

    /// - Parameters:
    ///   - log: the stand-in log to start from (read back from the data directory).
    ///   - file: the file every addition to the log is written to before the write is answered.
    init(log: CachetStandInLog = CachetStandInLog(), file: CachetStandInLogFile? = nil) {
        self.log = log
        self.file = file
    }

    /// `owner` went down in this node's view: its writes are recorded again, and what was on its way to it
    /// is handed out again on its next return.
    mutating func ownerWentDown(_ owner: String) {
        cleared.remove(owner)
        log.ownerWentDown(owner)
        delivering[owner] = nil
        handBack[owner] = nil
    }

    /// `member` answered at `now`. When it came back (`cameUp`), another member may now stand in where this
    /// node did, so no local copy is served again; and when it came back, or answers while this node owes
    /// it invalidations without having seen it down (the log was read back at start), its delivery starts.
    mutating func memberAnswered(_ member: String, cameUp: Bool, routable: Bool, now: UInt64) {
        if cameUp {
            // What this node may hand back to the member that came back: the keys it could serve until now.
            let servable = log.servableKeys(for: member)
            handBack[member] = servable.isEmpty ? nil : servable
            log.memberReturned()
        }
        guard cameUp || routable else { return }
        if !log.ownerReturned(member).isEmpty { returnedAt[member] = (now, false) }
    }

    /// This node may have been away (``NodeReturnHold/absenceCount`` moved: it stalled, or regained contact
    /// after it was cut off or in the minority): the others may have given the keys it stood in for to
    /// the next member of their preference lists, which took writes of them that this node never saw. So,
    /// as when another member comes back, no local copy is served or handed back until written here again;
    /// every key is still delivered to its owner.
    mutating func thisNodeMayHaveBeenAway() {
        log.memberReturned()
        handBack = [:]
    }

    /// Takes the hold's count of absences into account: when it moved since the last look, this node may
    /// have been away (``thisNodeMayHaveBeenAway()``). Called before anything reads or records the log.
    mutating func noteAbsences(_ count: UInt64?) {
        guard let count, count != absencesSeen else { return }
        absencesSeen = count
        thisNodeMayHaveBeenAway()
    }

    /// A returning `owner` asks whether its hold may end (`Protocol/CLUSTER.md`, "The owner's hold"): when
    /// this node owes it nothing (its phase is clean), the owner is marked cleared until it next goes down
    /// here, so that a write this node placed as the owner's stand-in before it saw the owner back, and
    /// records only now, is refused rather than recorded behind the owner's back (``isCleared(_:)``).
    /// - Returns: whether this node owes `owner` nothing.
    mutating func clearHold(of owner: String) -> Bool {
        guard log.phase(of: owner) == .clean else { return false }
        cleared.insert(owner)
        return true
    }

    /// Whether this node told `owner`, since it last went down here, that it owes it nothing.
    func isCleared(_ owner: String) -> Bool { cleared.contains(owner) }

    /// Whether a GET of `key`, served here for `owner`, may return the local value.
    func mayServeLocally(_ key: [UInt8], owner: String) -> Bool {
        log.mayServeLocally(key, owner: owner)
    }

    /// Records a write of `key` served here for `owner`, before it is answered: in the file first when the
    /// log gains a key or overflows (nothing is written for a key already recorded), then in the log (see
    /// ``CachetStandInLog/recordWrite(_:owner:ownerRoutable:servable:)``).
    /// - Returns: nil, or why the file could not record it: the write must be refused (SERVER_ERROR).
    mutating func recordWrite(_ key: [UInt8], owner: String, ownerRoutable: Bool, servable: Bool) -> String? {
        var remember = true
        if let file, let addition = log.addition(forWrite: key, owner: owner) {
            // A file at its budget (part of --disk-limit) takes the owner's overflow instead of the key: the
            // owner then gets a CLEAR on its return, as when its log passes its limits.
            remember = addition == .key && file.hasRoom(forKey: key, owner: owner)
            let record: CachetStandInLogFile.Record =
                remember ? .key(owner: owner, key: key) : .overflowed(owner: owner)
            if let failure = file.append(record) { return failure.message }
        }
        recordInLog(key, owner: owner, ownerRoutable: ownerRoutable, servable: servable, remember: remember)
        return nil
    }

    /// Records a write of `key` for `owner` in the log alone (the file, if any, already has it).
    private mutating func recordInLog(
        _ key: [UInt8],
        owner: String,
        ownerRoutable: Bool,
        servable: Bool,
        remember: Bool = true
    ) {
        _ = log.recordWrite(key, owner: owner, ownerRoutable: ownerRoutable, servable: servable, remember: remember)
        // Written here while the owner is being delivered to: as the stand-in in this node's view, the local
        // value is again the latest this node accepted; otherwise (a peer's, or the owner's own write passed
        // on while it holds) it is not handed back.
        if log.phase(of: owner) == .delivering {
            if servable {
                handBack[owner, default: []].insert(key)
            } else {
                handBack[owner]?.remove(key)
            }
        }
    }

    /// `owner` took a write of `key` itself while it holds, once this node had dropped its copy: no word on
    /// the key is owed to it any more (``CachetStandInLog/ownerTookWrite(_:owner:)``). The file keeps the
    /// key until the owner is clean: read back after a restart, it is delivered as a delete, which costs the
    /// owner a miss, never a stale value.
    /// - Returns: why the file could not drop the owner's records once it is clean (nil when it did, or had
    ///   nothing to do).
    mutating func ownerTookWrite(_ key: [UInt8], owner: String) -> String? {
        handBack[owner]?.remove(key)
        guard log.ownerTookWrite(key, owner: owner) else { return nil }
        delivering[owner] = nil
        handBack[owner] = nil
        returnedAt[owner] = nil
        let log = self.log
        return file?.ownerClean(owner, live: { Self.fileEntries(log) })?.message
    }

    /// Whether the local value of `key` may be handed back to `owner` with its delivery: this node took the
    /// key's latest write it knows of, in this run, and no other member had come back since.
    func mayHandBack(_ key: [UInt8], owner: String) -> Bool {
        handBack[owner]?.contains(key) ?? false
    }

    /// The invalidations to send now, each with its owner, marked as on their way: those for owners being
    /// delivered to that `member(ownerID)` finds routable, and not already on their way. Also returns the
    /// owners whose delivery has just become overdue (longer than `holdPeriod` since they came back).
    mutating func invalidationsDue(
        now: UInt64,
        holdPeriod: UInt64,
        routableMember: (String) -> CachetClusterMember?
    ) -> (due: [(owner: CachetClusterMember, invalidation: CachetStandInLog.Invalidation)], late: [String]) {
        var late: [String] = []
        for (owner, returned) in returnedAt where !returned.overdue && now &- returned.at > holdPeriod {
            returnedAt[owner] = (returned.at, true)
            overdueDeliveries += 1
            late.append(owner)
        }
        var due: [(owner: CachetClusterMember, invalidation: CachetStandInLog.Invalidation)] = []
        for owner in log.ownersNotClean where log.phase(of: owner) == .delivering {
            guard let member = routableMember(owner) else { continue }
            let sent = delivering[owner, default: []]
            for invalidation in log.outstandingInOrder(for: owner) where !sent.contains(invalidation) {
                due.append((member, invalidation))
                delivering[owner, default: []].insert(invalidation)
            }
        }
        return (due, late)
    }

    /// An invalidation's answer: acknowledged, or to be sent again. Once the owner is clean, the file drops
    /// its records.
    /// - Returns: the keys whose local copies may go, and why the file could not drop the owner's records
    ///   (nil when it did, or had nothing to do).
    mutating func invalidationAnswered(
        _ invalidation: CachetStandInLog.Invalidation,
        owner: String,
        acknowledged: Bool
    ) -> (drop: [[UInt8]], fileFailure: String?) {
        delivering[owner]?.remove(invalidation)
        guard acknowledged else { return ([], nil) }
        let (clean, drop) = log.delivered(invalidation, owner: owner)
        guard clean else { return (drop, nil) }
        delivering[owner] = nil
        returnedAt[owner] = nil
        handBack[owner] = nil
        let log = self.log
        return (drop, file?.ownerClean(owner, live: { Self.fileEntries(log) })?.message)
    }

    /// What the stand-in file must hold for `log`: each owner not clean, with its keys and overflow.
    static func fileEntries(_ log: CachetStandInLog) -> [(owner: String, keys: [[UInt8]], overflowed: Bool)] {
        log.ownersNotClean.map { owner in
            let recorded = log.recorded(for: owner)
            return (owner, recorded.keys, recorded.overflowed)
        }
    }
}

extension StandInLedger {
    /// Reads the stand-in log back from the data directory at start (`Protocol/CLUSTER.md`, "The
    /// stand-in's log"), and makes the file hold just that from then on.
    ///
    /// Every owner with records starts standing in, so it is told on its first answer; its keys are
    /// delivered but not served here (``CachetStandInLog/restore(owner:keys:overflowed:)``). A file that
    /// cannot be read whole (a bad header, a corrupt record, a read error) may have named any member after
    /// the damage, so every member of the cluster in force, and every owner it named, gets a CLEAR. A last
    /// record cut short is an append that did not finish: the write it was for was never answered, so it is
    /// ignored. Both are logged as warnings. When the file cannot be rewritten, it is logged as an error and
    /// writes for a member that is down are refused from then on.
    /// - Parameters:
    ///   - directory: the data directory.
    ///   - membership: the node's id and members.
    ///   - limits: the log's bounds per owner.
    ///   - maximumFileBytes: the file's budget, its share of `--disk-limit`.
    ///   - logger: where problems are logged.
    /// - Returns: the ledger to start from, with its file.
    static func open(
        directory: String,
        membership: CachetNodeMembership,
        limits: CachetStandInLog.Limits = .init(),
        maximumFileBytes: Int = CachetStandInLogFile.defaultMaximumFileBytes,
        logger: Logger
    ) -> StandInLedger {
        let (file, replay) = CachetStandInLogFile.open(
            directory: directory,
            maximumKeys: limits.maximumKeys,
            maximumBytes: limits.maximumBytes,
            maximumFileBytes: maximumFileBytes
        )
        var log = CachetStandInLog(limits: limits)
        let (nodeID, current) = membership.snapshot()
        for (owner, entry) in replay.owners where owner != nodeID {
            log.restore(owner: owner, keys: entry.keys, overflowed: entry.overflowed || replay.damage != nil)
        }
        if let damage = replay.damage {
            for member in current.members where member.id != nodeID {
                log.restore(owner: member.id, keys: [], overflowed: true)
            }
            let message =
                "the stand-in log file \(damage): the members it did not name whole are unknown, so every member "
                + "gets a CLEAR on its next answer"
            logger.warning(
                "\(message)",
                metadata: ["disk.path": "\(file.path)", "standin.records_read": "\(replay.records)"]
            )
        }
        if replay.truncatedTail > 0 {
            logger.warning(
                "the stand-in log file ends in a record cut short, an append that did not finish (the write it was for was not answered); ignored",
                metadata: ["disk.path": "\(file.path)", "standin.bytes_ignored": "\(replay.truncatedTail)"]
            )
        }
        let owners = log.ownersNotClean
        if !owners.isEmpty {
            logger.notice(
                "stand-in log read back: these members are told what this node wrote for them on their next answer",
                metadata: [
                    "cluster.members": "\(owners.joined(separator: ","))", "standin.records_read": "\(replay.records)",
                ]
            )
        }
        if let failure = file.rewrite(fileEntries(log)) {
            logger.error("\(failure.message)", metadata: ["disk.path": "\(file.path)"])
        }
        return StandInLedger(log: log, file: file)
    }
}
