import CachetCluster

/// What this node owes the members it stood in for (`Protocol/CLUSTER.md`, "Failover without stale
/// reads"): the stand-in log (what it wrote for each owner, and whether it may serve it), the invalidations
/// on their way to returned owners, and when each owner came back, to tell a delivery that took longer than
/// the owner's hold. Pure: no clock, no I/O, no lock; ``NodeHealth`` keeps it beside the peers' health under
/// one lock, because routing reads both at once, and writes the log's file.
struct StandInDuty {
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

    /// - Parameter log: the stand-in log to start from (read back from the data directory).
    init(log: CachetStandInLog = CachetStandInLog()) {
        self.log = log
    }

    /// `owner` went down in this node's view: its writes are recorded again, and what was on its way to it
    /// is handed out again on its next return.
    mutating func ownerWentDown(_ owner: String) {
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

    /// Whether a GET of `key`, served here for `owner`, may return the local value.
    func mayServeLocally(_ key: [UInt8], owner: String) -> Bool {
        log.mayServeLocally(key, owner: owner)
    }

    /// What the log's file must gain before a write of `key` for `owner` is answered (nil: nothing).
    func addition(forWrite key: [UInt8], owner: String) -> CachetStandInLog.Addition? {
        log.addition(forWrite: key, owner: owner)
    }

    /// Records a write of `key` served here for `owner` (see ``CachetStandInLog/recordWrite(_:owner:ownerRoutable:servable:)``).
    mutating func recordWrite(_ key: [UInt8], owner: String, ownerRoutable: Bool, servable: Bool, remember: Bool = true)
    {
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

    /// An invalidation's answer: acknowledged, or to be sent again.
    /// - Returns: the keys whose local copies may go, and whether the owner is now clean (the log's file
    ///   then drops its records).
    mutating func invalidationAnswered(
        _ invalidation: CachetStandInLog.Invalidation,
        owner: String,
        acknowledged: Bool
    ) -> (drop: [[UInt8]], clean: Bool) {
        delivering[owner]?.remove(invalidation)
        guard acknowledged else { return ([], false) }
        let (clean, drop) = log.delivered(invalidation, owner: owner)
        if clean {
            delivering[owner] = nil
            returnedAt[owner] = nil
            handBack[owner] = nil
        }
        return (drop, clean)
    }
}
