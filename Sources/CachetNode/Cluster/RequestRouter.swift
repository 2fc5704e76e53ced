import CachetCluster
import CachetIO
import CachetStore
import CachetWire

/// The routing decision of a node of a cluster: where a request for a key goes (served here, forwarded to
/// the owner or a stand-in, or answered as a miss or a refusal), from which member owns the key, the peers'
/// health with the stand-in ledger, and the owner's hold (`Protocol/CLUSTER.md`, "Forwarding" and "Failover
/// without stale reads"). What the request then does to the store is ``NodeCommands``'.
///
/// One per event loop (its ring router is), used only on that loop's queue.
final class RequestRouter {
    /// Which member owns a key.
    let router: ForwardRouter
    /// The peers' health, the minority rule and the stand-in ledger.
    let health: NodeHealth
    /// The owner's hold (nil in a cluster of one member at start).
    let hold: NodeReturnHold?
    /// Warm-up after a membership change; nil when turned off.
    let warmUp: NodeWarmUp?
    /// The loop's commands: the local copies a route drops, the counters it bumps.
    let commands: NodeCommands

    /// A router over the cluster's parts, for a loop whose commands are `commands`.
    init(_ parts: ClusterRouting, commands: NodeCommands) {
        router = parts.router
        health = parts.health
        hold = parts.hold
        warmUp = parts.warmUp
        self.commands = commands
    }

    private var counters: RequestCounters { commands.counters }
    /// What this node gives its peers and takes from them.
    var peerValues: PeerValues { PeerValues(commands: commands, cluster: self) }

    /// Where a request for a key goes on a node of a cluster (`Protocol/CLUSTER.md`, "Forwarding" and
    /// "Failover without stale reads"):
    /// - this node's key: served here, but a GET misses while the node holds (it may have been away, or it
    ///   reaches fewer than a majority of the members);
    /// - another member's key, without `forwarded`: to the owner, or to the stand-in when the owner is
    ///   down; or served here when this node is the stand-in (or still owes the owner invalidations);
    /// - another member's key with `forwarded` (one hop at most): served here, counted as a routing
    ///   disagreement unless this node stands in for the owner.
    /// Served here for another owner: a GET returns the local value only for a key written here in this
    /// episode (else a miss: any older copy may be stale), and a PUT or DEL is recorded in the stand-in log
    /// (and its file, with a data directory) before it is answered; one the file cannot take is refused.
    @inline(never)
    func route(
        _ frame: CachetFrame,
        key: Range<Int>,
        in buffer: UnsafeRawBufferPointer,
        output: inout CachetByteBuffer
    ) -> RouteDecision {
        let keyBytes = UnsafeRawBufferPointer(rebasing: buffer[key])
        let header = frame.header
        let forwarded = header.flags & CachetRequestFlags.forwarded.rawValue != 0
        // A GET, or a meta get that only reads (memcached's `mg` without `T` or `N`, which travels as an item
        // PUT): served, missed or sent on as a read, never recorded or refused as a write.
        let reads = header.opcode == .get || Self.isItemRead(frame, key: key, in: buffer)
        // A request a holding member sent on, or an invalidation, is served here, never sent on.
        let lastHop =
            forwarded
            && header.flags & (CachetRequestFlags.lastHop.rawValue | CachetRequestFlags.invalidation.rawValue) != 0
        noteInvalidation(header)
        let foreignOwner = router.foreignOwner(of: keyBytes)
        let ownersWord =
            CachetRequestFlags.forwarded.rawValue | CachetRequestFlags.invalidation.rawValue
            | CachetRequestFlags.lastHop.rawValue | CachetRequestFlags.fromOwner.rawValue
        if header.flags & ownersWord == ownersWord && header.opcode == .delete, let owner = foreignOwner {
            return ownersWriteConfirmed(header, key: keyBytes, owner: owner, output: &output)
        }
        if forwarded && header.flags & CachetRequestFlags.invalidation.rawValue != 0 {
            // A stand-in's word on a key (`Protocol/CLUSTER.md`, "Handing back values"): its value is stored only
            // by the key's owner while it holds, as the first word on the key in that hold, and only when its
            // memory holds no value of the key (one there was written here, perhaps after the stand-in read
            // its own, or handed back already); otherwise the key is deleted, as an invalidation deletes it.
            // An invalidation (a confirmation too) is a word.
            if header.opcode == .put && header.flags & CachetRequestFlags.lastHop.rawValue == 0 {
                let held =
                    commands.store.withValue(forKey: keyBytes, now: CachetClock.now(), marking: false) { _, _ in true }
                    ?? false
                guard foreignOwner == nil, !held, hold?.takesHandBack(keyBytes) == true else {
                    if let failure = dropLocalCopy(keyBytes) {
                        appendMessage(failure, status: .serverError, opcode: .put, id: header.id, to: &output)
                    } else {
                        appendReply(opcode: .put, status: .ok, id: header.id, to: &output)
                    }
                    return .answered
                }
            } else if header.opcode == .delete, foreignOwner == nil {
                hold?.invalidated(keyBytes)
            }
        }
        guard let owner = foreignOwner else {
            // This node's key. While it holds, a request goes to the key's stand-in: a GET here could return
            // a value a stand-in replaced, and a write taken here could be overtaken by the stand-in, which
            // may not see this node back yet and go on serving an older value. A GET from a peer (which
            // already sees this node back) misses instead, so that a request crosses at most two members;
            // a write from a peer goes to the stand-in too, rather than being refused. The stand-ins'
            // invalidations, which are what the hold waits for, are applied here. A peer's request reaching
            // this node while it sees every peer failed starts the hold (a partition healed). In the
            // minority (fewer than a majority of the members reached: the minority rule), it holds as well,
            // and sends requests only to a stand-in that is up.
            guard let hold else { return .here }
            if forwarded { hold.peerRequestArrived() }
            let minority = hold.isInMinority
            guard minority || hold.isHoldingAfterAbsence() else { return .here }
            // (A meta get that reads is not sent on to the stand-in as a GET is: it travels as an item write, which
            // the stand-in would take for a hand-back's word. It misses here.)
            if reads {
                if header.opcode == .get, !forwarded,
                    let standIn = health.standIn(forOwnKey: keyBytes, upOnly: minority)
                {
                    return .pending(forward(frame, in: buffer, to: standIn, lastHop: true))
                }
                if minority { RequestCounters.bump(counters.minorityMisses) }
                return miss(header.id, opcode: header.opcode, output: &output)
            }
            if header.flags & CachetRequestFlags.invalidation.rawValue != 0 { return .here }
            if !lastHop, let standIn = health.standIn(forOwnKey: keyBytes, upOnly: minority) {
                // A hand-back of the key still on its way (read before this write) would be older: it now deletes.
                hold.invalidated(keyBytes)
                if !minority && header.flags & CachetRequestFlags.lease.rawValue == 0 {
                    // Back from an absence: the write is taken here, once the stand-in has dropped its copy (so
                    // that nobody serves an older value meanwhile) and forgotten the key (this write is newer
                    // than any it took), and kept for when the hold ends, instead of being left at the
                    // stand-in, which would only hand back a delete of it. The local copy goes first, through
                    // the disk journal: killed before the write is applied here, this node must not serve it
                    // once the stand-in no longer owes it a word on the key.
                    if let failure = dropLocalCopy(keyBytes) {
                        appendMessage(failure, status: .serverError, opcode: header.opcode, id: header.id, to: &output)
                        return .answered
                    }
                    return ownersConfirmation(frame, in: buffer, key: keyBytes, at: standIn)
                }
                // In the minority (or a leased PUT): the write goes to the stand-in, and the local copy goes
                // first: once the hold ends it would be older than what the stand-in took. The stand-in serves
                // it without asking this node to confirm: that copy is gone.
                if let failure = dropLocalCopy(keyBytes) {
                    appendMessage(failure, status: .serverError, opcode: header.opcode, id: header.id, to: &output)
                    return .answered
                }
                return .pending(forward(frame, in: buffer, to: standIn, lastHop: true))
            }
            if minority {
                RequestCounters.bump(counters.minorityMisses)
                appendMessage(
                    hold.minorityRefusal(ownKey: true),
                    status: .unavailable,
                    opcode: header.opcode,
                    id: header.id,
                    to: &output
                )
                return .answered
            }
            appendMessage(
                "this node is back from an absence and no other member can take writes of its keys for it yet; "
                    + "try again shortly",
                status: .unavailable,
                opcode: header.opcode,
                id: header.id,
                to: &output
            )
            return .answered
        }
        // Read before the write is placed: an owner cleared for the end of its hold after this is not
        // recorded for behind its back (``NodeHealth/recordWrite(_:ownerID:servable:clearancesBefore:)``).
        let clearancesBefore = health.clearancesGiven
        let placement = health.place(
            keyBytes,
            owner: owner,
            forwarded: forwarded,
            inMinority: hold?.isInMinority ?? false
        ) {
            hold?.isHoldingAfterAbsence() ?? false
        }
        // Served here: as the stand-in in this node's view (servable later), or forwarded by a peer with
        // another view (recorded and delivered, but not served from here later: the writes after it may go
        // where this node routes the key).
        let ownerID = owner.id
        let servable: Bool
        switch placement {
        case .standIn:
            servable = true
        case .forward(let target):
            if !forwarded { return .pending(forward(frame, in: buffer, to: target)) }
            if let decision = disagreement(frame, in: buffer, key: keyBytes, routedTo: target, output: &output) {
                return decision
            }
            servable = false
        case .delivering(let returned):
            // The owner is back and this node still owes it invalidations: another node may hold a newer
            // value; the local copy is not served.
            if reads { return miss(header.id, opcode: header.opcode, output: &output) }
            if !forwarded { return .pending(forward(frame, in: buffer, to: returned)) }
            if let decision = disagreement(frame, in: buffer, key: keyBytes, routedTo: returned, output: &output) {
                return decision
            }
            servable = false
        case .deferred(let next):
            // Forwarded or not, the next stand-in takes it (a second hop for a forwarded one, its last); one
            // that already made its second hop is served here, recorded and delivered but not served later.
            // Such a GET misses: while this node holds, the others send the key's writes to `next`, so any
            // copy here may be older than one they took.
            if lastHop && reads { return miss(header.id, opcode: header.opcode, output: &output) }
            guard lastHop else { return .pending(forward(frame, in: buffer, to: next, lastHop: forwarded)) }
            if let decision = disagreement(frame, in: buffer, key: keyBytes, routedTo: next, output: &output) {
                return decision
            }
            servable = false
        case .unsettled:
            if reads { return miss(header.id, opcode: header.opcode, output: &output) }
            appendMessage(
                "this node cannot tell yet whether the members that could take the key of \(owner.id) in its "
                    + "place are down or it is cut off itself; try again shortly",
                status: .unavailable,
                opcode: header.opcode,
                id: header.id,
                to: &output
            )
            return .answered
        case .minority:
            RequestCounters.bump(counters.minorityMisses)
            if reads { return miss(header.id, opcode: header.opcode, output: &output) }
            appendMessage(
                hold.unsafelyUnwrapped.minorityRefusal(ownKey: false),
                status: .unavailable,
                opcode: header.opcode,
                id: header.id,
                to: &output
            )
            return .answered
        }
        if reads {
            return health.mayServeLocally(Array(keyBytes), ownerID: ownerID)
                ? .here : miss(header.id, opcode: header.opcode, output: &output)
        }
        if let refusal = health.recordWrite(
            Array(keyBytes),
            ownerID: ownerID,
            servable: servable,
            clearancesBefore: clearancesBefore
        ) {
            // Not in the stand-in file, so not acknowledged: a crash could lose what the owner must be told;
            // or the owner was cleared to serve its keys again meanwhile.
            appendMessage(refusal.message, status: refusal.status, opcode: header.opcode, id: header.id, to: &output)
            return .answered
        }
        return .here
    }

    /// A stand-in's invalidation (a DEL or CLEAR with the `invalidation` flag, or a PUT handing a value back)
    /// makes the owner's hold last
    /// while they keep arriving (`Protocol/CLUSTER.md`, "The owner's hold"), whatever the key: the stand-in
    /// sends it because it takes this node for the owner. A confirmation (`lastHop` too) is one write's, not
    /// a delivery in progress, and does not.
    @inline(__always)
    func noteInvalidation(_ header: CachetFrameHeader) {
        guard header.flags & CachetRequestFlags.invalidation.rawValue != 0,
            header.flags & CachetRequestFlags.lastHop.rawValue == 0,
            header.opcode == .delete || header.opcode == .clear || header.opcode == .put
        else { return }
        hold?.invalidationReceived()
    }

    /// A peer's PING with `forwarded` and one of the members' flags (``PeerPings``): answered here, and true;
    /// false for a PING that carries none, which the caller answers as any PING.
    func answerPeerPing(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        output: inout CachetByteBuffer
    ) throws(CachetWireError) -> Bool {
        try PeerPings(health: health).answer(frame, in: buffer, output: &output)
    }

    /// A write a peer forwarded here while this node routes the key to `target` (the owner, or another
    /// stand-in): the two see the cluster differently, and `target` may serve its own copy of the key to
    /// those who route it there. Rather than a copy here that nobody would read, `target` is sent an
    /// invalidation of the key (`forwarded`, `invalidation` and `lastHop`, on a connection of its own:
    /// ``PeerForwarder``), and the write is acknowledged once `target` has taken it (a PUT's value is
    /// dropped: a later GET misses, never reads the value the write replaced). Nil for a GET. Not called for
    /// an invalidation: those are served where they arrive, so a confirmation never waits for another.
    private func confirmation(
        of frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        key: UnsafeRawBufferPointer,
        at target: CachetClusterMember
    ) -> RouteDecision? {
        let header = frame.header
        guard header.opcode == .put || header.opcode == .delete else { return nil }
        RequestCounters.bump(counters.forwards)
        return .pending(
            .forward(
                .confirmation(
                    of: key,
                    opcode: header.opcode,
                    id: header.id,
                    to: target,
                    original: ForwardRequest.requestBytes(frame, in: buffer)
                )
            )
        )
    }

    /// A holding owner's confirmation of a write of its key it takes itself (`fromOwner`): this node's copy,
    /// served or not, goes, so that none older than that write is served here, and no word on the key is owed
    /// to the owner any more (its write is newer than any this node took). Where this node sends the key
    /// decides the rest: to the owner itself, or here as the stand-in, that is all (OK); to another member,
    /// that member must drop its copy too (the same confirmation, `relayed`) before the owner may apply the
    /// write, since that is where the others read the key. A relayed one is sent on again only along a chain
    /// of members that hold and defer (each to the next member on the key's preference list, so the chain
    /// ends), and refused by a member that routes the key to a stand-in of its own view. Unsettled, or in the
    /// minority: refused, and the owner refuses the write.
    private func ownersWriteConfirmed(
        _ header: CachetFrameHeader,
        key: UnsafeRawBufferPointer,
        owner: CachetClusterMember,
        output: inout CachetByteBuffer
    ) -> RouteDecision {
        let placement = health.place(key, owner: owner, forwarded: true, inMinority: hold?.isInMinority ?? false) {
            hold?.isHoldingAfterAbsence() ?? false
        }
        let elsewhere: CachetClusterMember?
        // A member that would stand in but holds defers to the next one after it on the key's preference
        // list: a relayed confirmation follows such deferrals (each moves on along the list, so it ends), but
        // goes no further from a member that routes the key to a stand-in of its own view.
        var deferred = false
        switch placement {
        case .standIn: elsewhere = nil
        case .forward(let target): elsewhere = target.id == owner.id ? nil : target
        case .delivering: elsewhere = nil
        case .deferred(let next):
            elsewhere = next
            deferred = true
        case .unsettled, .minority:
            appendMessage(
                "this node cannot tell yet where the key of \(owner.id) is served, so it cannot confirm its write",
                status: .unavailable,
                opcode: .delete,
                id: header.id,
                to: &output
            )
            return .answered
        }
        if let failure = dropLocalCopy(key) {
            appendMessage(failure, status: .serverError, opcode: .delete, id: header.id, to: &output)
            return .answered
        }
        health.ownerTookWrite(Array(key), ownerID: owner.id)
        guard let elsewhere else {
            appendReply(opcode: .delete, status: .ok, id: header.id, to: &output)
            return .answered
        }
        guard deferred || header.flags & CachetRequestFlags.relayed.rawValue == 0 else {
            // Sent on once already, to a member that routes the key to a stand-in of its own view: refused
            // rather than sent on again.
            appendMessage(
                "this node routes the key of \(owner.id) to \(elsewhere.id), so it cannot confirm its write",
                status: .unavailable,
                opcode: .delete,
                id: header.id,
                to: &output
            )
            return .answered
        }
        RequestCounters.bump(counters.forwards)
        return .pending(
            .forward(
                .confirmation(of: key, flags: [.fromOwner, .relayed], opcode: .delete, id: header.id, to: elsewhere)
            )
        )
    }

    /// The confirmation a holding owner sends its stand-in for a write of its own key (a DEL with
    /// `forwarded`, `invalidation`, `lastHop` and `fromOwner`): once the stand-in has dropped its copy, the
    /// write is applied here (``ForwardRequest/appliesHere``).
    private func ownersConfirmation(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        key: UnsafeRawBufferPointer,
        at standIn: CachetClusterMember
    ) -> RouteDecision {
        RequestCounters.bump(counters.forwards)
        return .pending(
            .forward(
                .confirmation(
                    of: key,
                    flags: .fromOwner,
                    opcode: frame.header.opcode,
                    id: frame.header.id,
                    to: standIn,
                    original: ForwardRequest.requestBytes(frame, in: buffer),
                    secondHop: frame.header.flags & CachetRequestFlags.forwarded.rawValue != 0,
                    appliesHere: true
                )
            )
        )
    }

    /// A request a peer forwarded here for a key this node routes to `target`: counted as a routing
    /// disagreement; a confirmation (an invalidation with `lastHop`) is refused, a write is confirmed with
    /// `target`; nil for what is served here (a GET, by the stand-in log's rule; an invalidation).
    private func disagreement(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        key: UnsafeRawBufferPointer,
        routedTo target: CachetClusterMember,
        output: inout CachetByteBuffer
    ) -> RouteDecision? {
        RequestCounters.bump(counters.routingDisagreements)
        let flags = frame.header.flags
        guard flags & CachetRequestFlags.invalidation.rawValue == 0 else {
            if flags & CachetRequestFlags.lastHop.rawValue == 0 { return nil }
            return refuseConfirmation(frame.header, routedTo: target, output: &output)
        }
        return confirmation(of: frame, in: buffer, key: key, at: target)
    }

    /// Refuses a confirmation (an invalidation with `lastHop`) for a key this node routes to `target`: its
    /// own copy is not what others read, so dropping it would not make the write it confirms safe; the
    /// peer that asked answers that write UNAVAILABLE.
    private func refuseConfirmation(
        _ header: CachetFrameHeader,
        routedTo target: CachetClusterMember,
        output: inout CachetByteBuffer
    ) -> RouteDecision {
        appendMessage(
            "this node routes the key to \(target.id), so it cannot confirm a write of it",
            status: .unavailable,
            opcode: header.opcode,
            id: header.id,
            to: &output
        )
        return .answered
    }

    /// Answers a GET with a miss, counted as one.
    private func miss(_ id: UInt32, opcode: CachetOpcode = .get, output: inout CachetByteBuffer) -> RouteDecision {
        RequestCounters.bump(counters.gets)
        RequestCounters.bump(counters.misses)
        appendReply(opcode: opcode, status: .notFound, id: id, to: &output)
        return .answered
    }

    /// Whether a frame is a PUT with the `item` flag whose mode only reads: a meta get that neither touches
    /// nor vivifies (``CachetWire/CachetItemWrite/Mode/metaGet``).
    static func isItemRead(_ frame: CachetFrame, key: Range<Int>, in buffer: UnsafeRawBufferPointer) -> Bool {
        let end = min(frame.body.upperBound, buffer.count)
        guard frame.header.opcode == .put, frame.header.flags & CachetRequestFlags.item.rawValue != 0,
            key.upperBound < end
        else { return false }
        let mode = buffer[key.upperBound]
        guard mode & ~CachetItemWrite.newCASBit == CachetItemWrite.Mode.metaGet.rawValue else { return false }
        let options = key.upperBound + CachetItemWrite.headerSize + (mode & CachetItemWrite.newCASBit == 0 ? 0 : 8)
        // Exactly its 9 bytes of options, neither touch (1) nor vivify (2) among them (a read that does not
        // mark the item, 4, is a read): anything else is for the item write's decoder to refuse.
        return options + 9 == end && buffer[options] & 3 == 0
    }

    /// The forward of a request to `target` (``ForwardRequest/passingOn(_:in:to:lastHop:)``), counted.
    private func forward(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        to target: CachetClusterMember,
        lastHop: Bool = false
    ) -> PendingOperation {
        RequestCounters.bump(counters.forwards)
        return .forward(ForwardRequest.passingOn(frame, in: buffer, to: target, lastHop: lastHop))
    }

    /// Removes this node's copy of one of its own keys (memory, and the disk tier through its queue) before
    /// a write of it is sent to the stand-in. Returns why the disk tier could not record the removal: the
    /// write must then be refused, since the copy left on disk could be served once the hold ends.
    private func dropLocalCopy(_ key: UnsafeRawBufferPointer) -> String? {
        commands.dropCopy(key)
    }
}
