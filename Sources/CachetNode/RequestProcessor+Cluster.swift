import CachetCluster
import CachetIO
import CachetStore
import CachetWire

/// What a node of a cluster needs to route a request: which member owns a key, the peers' health with the
/// stand-in log, and the owner's hold (nil in a cluster of one member at start).
/// Per loop (its router is), used on the loop's queue.
final class ClusterRouting {
    let router: ForwardRouter
    let health: NodeHealth
    let hold: NodeReturnHold?

    init(router: ForwardRouter, health: NodeHealth, hold: NodeReturnHold?) {
        self.router = router
        self.health = health
        self.hold = hold
    }
}

/// Where a request for a key goes (see `RequestProcessor.route`).
enum RouteDecision {
    /// Served here, as usual.
    case here
    /// Answered already (a miss).
    case answered
    /// Forwarded.
    case pending(PendingOperation)
}

// MARK: - Cluster routing

extension RequestProcessor {
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
        let cluster = self.cluster.unsafelyUnwrapped
        let health = cluster.health
        noteInvalidation(header)
        guard let owner = cluster.router.foreignOwner(of: keyBytes) else {
            // This node's key. While it holds, a request goes to the key's stand-in: a GET here could return
            // a value a stand-in replaced, and a write taken here could be overtaken by the stand-in, which
            // may not see this node back yet and go on serving an older value. A GET from a peer (which
            // already sees this node back) misses instead, so that a request crosses at most two members;
            // a write from a peer goes to the stand-in too, rather than being refused. The stand-ins'
            // invalidations, which are what the hold waits for, are applied here. A peer's request reaching
            // this node while it sees every peer failed starts the hold (a partition healed). In the
            // minority (fewer than a majority of the members reached: the minority rule), it holds as well,
            // and sends requests only to a stand-in that is up.
            guard let hold = cluster.hold else { return .here }
            if forwarded { hold.peerRequestArrived() }
            let minority = hold.isInMinority
            guard minority || hold.isHoldingAfterAbsence() else { return .here }
            if header.opcode == .get {
                if !forwarded, let standIn = health.standIn(forOwnKey: keyBytes, upOnly: minority) {
                    return .pending(forward(frame, in: buffer, to: standIn))
                }
                if minority { RequestCounters.bump(counters.minorityMisses) }
                return miss(header.id, output: &output)
            }
            if header.flags & CachetRequestFlags.invalidation.rawValue != 0 { return .here }
            if let standIn = health.standIn(forOwnKey: keyBytes, upOnly: minority) {
                // The local copy goes first: once the hold ends it would be older than what the stand-in took.
                if let failure = dropLocalCopy(keyBytes) {
                    appendMessage(failure, status: .serverError, opcode: header.opcode, id: header.id, to: &output)
                    return .answered
                }
                return .pending(forward(frame, in: buffer, to: standIn))
            }
            if minority {
                RequestCounters.bump(counters.minorityMisses)
                appendMessage(
                    hold.minorityRefusal,
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
        let ownerID: String
        let placement = health.place(keyBytes, owner: owner, forwarded: forwarded) {
            cluster.hold?.isHoldingAfterAbsence() ?? false
        }
        switch placement {
        case .deferred(let next):
            // Forwarded or not: the next stand-in takes it (a second hop for a forwarded one).
            return .pending(forward(frame, in: buffer, to: next))
        case .unsettled:
            if header.opcode == .get { return miss(header.id, output: &output) }
            appendMessage(
                "this node is back from an absence and has not yet heard from the members that could stand in "
                    + "for the key's owner \(owner.id); try again shortly",
                status: .unavailable,
                opcode: header.opcode,
                id: header.id,
                to: &output
            )
            return .answered
        default:
            break
        }
        if forwarded {
            ownerID = owner.id
            switch placement {
            case .standIn, .deferred, .unsettled: break  // the last two returned above
            case .delivering:
                // The owner is back and this node still owes it invalidations: another node may hold a
                // newer value; the local copy is not served.
                if header.opcode == .get { return miss(header.id, output: &output) }
                RequestCounters.bump(counters.routingDisagreements)
            case .forward:
                RequestCounters.bump(counters.routingDisagreements)
            }
        } else {
            switch placement {
            case .forward(let target): return .pending(forward(frame, in: buffer, to: target))
            case .standIn(let id): ownerID = id
            case .delivering(let owner):
                if header.opcode == .get { return miss(header.id, output: &output) }
                return .pending(forward(frame, in: buffer, to: owner))
            case .deferred, .unsettled: ownerID = owner.id  // returned above, not reached
            }
        }
        if header.opcode == .get {
            return health.mayServeLocally(Array(keyBytes), ownerID: ownerID) ? .here : miss(header.id, output: &output)
        }
        // Served here as the stand-in in this node's view, or forwarded by a peer with another view: then it
        // is recorded and delivered, but not served from here later.
        let servable: Bool
        if case .standIn = placement { servable = true } else { servable = false }
        if let failure = health.recordWrite(Array(keyBytes), ownerID: ownerID, servable: servable) {
            // Not in the stand-in file, so not acknowledged: a crash could lose what the owner must be told.
            appendMessage(failure, status: .serverError, opcode: header.opcode, id: header.id, to: &output)
            return .answered
        }
        return .here
    }

    /// A stand-in's invalidation (a DEL or CLEAR with the `invalidation` flag) makes the owner's hold last
    /// while they keep arriving (`Protocol/CLUSTER.md`, "The owner's hold"), whatever the key: the stand-in
    /// sends it because it takes this node for the owner.
    @inline(__always)
    func noteInvalidation(_ header: CachetFrameHeader) {
        guard header.flags & CachetRequestFlags.invalidation.rawValue != 0,
            header.opcode == .delete || header.opcode == .clear
        else { return }
        cluster.unsafelyUnwrapped.hold?.invalidationReceived()
    }

    /// Answers a GET with a miss, counted as one.
    private func miss(_ id: UInt32, output: inout CachetByteBuffer) -> RouteDecision {
        RequestCounters.bump(counters.gets)
        RequestCounters.bump(counters.misses)
        appendReply(opcode: .get, status: .notFound, id: id, to: &output)
        return .answered
    }

    /// The forward of a request to `target` (the key's owner, or its stand-in), with `forwarded` set.
    private func forward(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        to target: CachetClusterMember
    ) -> PendingOperation {
        RequestCounters.bump(counters.forwards)
        let forwarded = CachetRequestFlags.forwarded.rawValue
        let start = frame.body.lowerBound - CachetProtocol.headerSize - CachetProtocol.lengthPrefixSize
        var request = Array(buffer[start..<frame.end])
        request.withUnsafeMutableBytes {
            $0.storeBytes(of: (frame.header.flags | forwarded).bigEndian, toByteOffset: 6, as: UInt16.self)
        }
        return .forward(ForwardRequest(frame: request, opcode: frame.header.opcode, id: frame.header.id, owner: target))
    }

    /// Deletes the local copies of keys this node stood in for, once their owner has been told (they are
    /// never served again either way; this returns their memory). Disk deletions that cannot be queued
    /// are skipped: the copies are dead whatever happens to them.
    /// Removes this node's copy of one of its own keys (memory, and the disk tier through its queue) before
    /// a write of it is sent to the stand-in. Returns why the disk tier could not record the removal: the
    /// write must then be refused, since the copy left on disk could be served once the hold ends.
    private func dropLocalCopy(_ key: UnsafeRawBufferPointer) -> String? {
        disk?.worker.beginWrite(key: key)
        _ = store.remove(key: key, now: CachetClock.now())
        guard let disk else { return nil }
        if case .refused(let error) = disk.worker.submitRemove(key: Array(key)) { return error.message }
        return nil
    }

    func dropStandInCopies(_ keys: [[UInt8]]) {
        let now = CachetClock.now()
        for key in keys {
            key.withUnsafeBytes { key in
                disk?.worker.beginWrite(key: key)
                _ = store.remove(key: key, now: now)
                _ = disk?.worker.submitRemove(key: Array(key))
            }
        }
    }

    /// The fan-out of a CLEAR or STATS with the `cluster` flag (and without `forwarded`, which cancels it):
    /// the same request, `forwarded` set and `cluster` clear, for every member, this node included.
    @inline(never)
    func fanOut(_ frame: CachetFrame, in buffer: UnsafeRawBufferPointer) -> PendingOperation? {
        let flags = CachetRequestFlags(rawValue: frame.header.flags)
        guard flags.contains(.cluster), !flags.contains(.forwarded) else { return nil }
        let start = frame.body.lowerBound - CachetProtocol.headerSize - CachetProtocol.lengthPrefixSize
        var request = Array(buffer[start..<frame.end])
        let word = (frame.header.flags | CachetRequestFlags.forwarded.rawValue) & ~CachetRequestFlags.cluster.rawValue
        request.withUnsafeMutableBytes { $0.storeBytes(of: word.bigEndian, toByteOffset: 6, as: UInt16.self) }
        let nobody = CachetClusterMember(id: "", host: "", port: 0)
        return .fanOut(ForwardRequest(frame: request, opcode: frame.header.opcode, id: frame.header.id, owner: nobody))
    }
}
