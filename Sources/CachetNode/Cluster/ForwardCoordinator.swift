import CachetCluster
import CachetIO
import CachetStore
import CachetWire
import Logging

/// What a node does with a request another member answers (`Protocol/CLUSTER.md`, "Forwarding"): it sends
/// the request on through the loop's peer connections (``PeerForwarder``), decides what a request that was
/// not applied leads to (refused before it was sent, or unanswered when the member closed the connection
/// gracefully: it goes to where the key is routed now; a refused confirmation is served again in this node's
/// view), and turns the outcome into the client's reply, its opcode and id
/// restored. The cluster-wide CLEAR and STATS go to every member and their answers are gathered into one
/// reply.
///
/// It knows nothing of connections: the ``NodeIOQueue`` that hosts them keeps each reply's place in its
/// connection's ``ForwardPipeline`` and hands the coordinator a closure that fills it. One per I/O queue,
/// used only on that queue (as its processor and peer connections are).
final class ForwardCoordinator {
    /// The connections to the other members, with their deadlines, health reports and probes.
    let forwarder: PeerForwarder
    /// Where keys go, for the cluster-wide fan-out and for a write routed again after a refusal.
    private let router: ForwardRouter?
    /// The loop's request processor: serves a write again after a refused confirmation.
    private let processor: RequestProcessor
    private let logger: Logger

    init(forwarder: PeerForwarder, router: ForwardRouter?, processor: RequestProcessor, logger: Logger) {
        self.forwarder = forwarder
        self.router = router
        self.processor = processor
        self.logger = logger
    }

    /// Sends `request` on and calls `answer` with the client's reply once it is known, on the loop's queue,
    /// possibly before this returns (an owner marked down). GETs of one key in the air at once share one
    /// request (singleflight); each is answered.
    /// - Parameters:
    ///   - isWanted: whether someone still waits for the reply (the client's connection is open); a refusal
    ///     of a request nobody waits for is not acted on.
    ///   - answer: takes the reply's bytes.
    func forward(
        _ request: ForwardRequest,
        isWanted: @escaping () -> Bool,
        answer: @escaping ([UInt8]) -> Void
    ) {
        let collapsed = forwarder.forward(request) { [self] outcome in
            guard isWanted() else { return }
            settle(request, outcome, retries: 2, answer: answer)
        }
        if collapsed { RequestCounters.bump(processor.commands.counters.forwardsCollapsed) }
    }

    /// Answers `request` from its forward's outcome, or sends it again when the outcome says it was not
    /// applied (at most `retries` more times):
    /// - a confirmation refused (the member's port is closed: it serves no copy, and is now marked down)
    ///   leaves the write to this node's view again: most often served here as the stand-in;
    /// - a request refused before it was sent (the member is gone, now marked down), or left unanswered by
    ///   a member that closed the connection gracefully (it is stopping: it applied nothing it did not
    ///   answer), goes to where the key is routed now: a stand-in once the member is marked down, or the
    ///   same member again after a close (a new connection, which a stopped member refuses).
    private func settle(
        _ request: ForwardRequest,
        _ outcome: ForwardOutcome,
        retries: Int,
        answer: @escaping ([UInt8]) -> Void
    ) {
        if request.appliesHere, case .answered(let status, _) = outcome, status == .ok || status == .notFound {
            applyHere(request, standInHadIt: status == .ok, answer: answer)
            return
        }
        guard !request.warmUp, retries > 0, case .unavailable(_, let cause) = outcome,
            cause == .refused || cause == .closed
        else {
            answer(reply(to: request, outcome))
            return
        }
        if request.confirmation {
            // A confirmation with no write of its own (relayed for an owner): its refusal is the answer.
            guard !request.original.isEmpty else {
                answer(reply(to: request, outcome))
                return
            }
            serveHere(request.original, for: request, retries: retries - 1, answer: answer)
            return
        }
        if let next = rerouted(request, sameOwner: cause == .closed) {
            forwarder.forward(next) { [self] outcome in settle(next, outcome, retries: retries - 1, answer: answer) }
        } else if !request.secondHop {
            // Routed here now (this node stands in for the member that refused or left) or nowhere yet: the
            // client's request is served as if it had just arrived.
            serveHere(Self.clientFrame(of: request), for: request, retries: retries - 1, answer: answer)
        } else {
            answer(reply(to: request, outcome))
        }
    }

    /// Applies here the write a holding owner's confirmation was for, now that its stand-in has dropped its
    /// copy of the key (``ForwardRequest/appliesHere``), if this node still holds, and answers it as any write
    /// of this node is: the
    /// value kept in memory and written through to the disk tier (answered once the disk queue takes it
    /// when it is full), or the key deleted (OK when the stand-in or this node had it).
    private func applyHere(_ request: ForwardRequest, standInHadIt: Bool, answer: @escaping ([UInt8]) -> Void) {
        let commands = processor.commands
        guard processor.cluster?.hold?.isHoldingAfterAbsence() == true else {
            // The hold ended while the confirmation was on its way: writes of the key are taken here directly
            // again, and one of them may already be newer. Acknowledged without being applied, as a
            // confirmed write is (its copies are gone: a miss, never an older value).
            var output = CachetByteBuffer(capacity: 64)
            appendReply(opcode: request.opcode, status: .ok, id: request.id, to: &output)
            answer(Array(output.readableRegion))
            return
        }
        let now = CachetClock.now()
        var output = CachetByteBuffer(capacity: 256)
        let applied: Bool? = request.original.withUnsafeBytes { buffer -> Bool? in
            guard
                let frame = try? CachetFrameDecoder.decodeFrame(
                    in: buffer,
                    at: 0,
                    maximumPayloadLength: processor.maximumPayloadLength
                )
            else { return nil }
            switch request.opcode {
            case .put:
                guard let put = try? CachetBodyDecoder.decodePut(in: buffer, body: frame.body) else { return nil }
                let outcome = commands.put(
                    key: UnsafeRawBufferPointer(rebasing: buffer[put.key]),
                    value: UnsafeRawBufferPointer(rebasing: buffer[put.value]),
                    ttl: put.ttl,
                    now: now
                )
                switch outcome {
                case .stored:
                    appendReply(opcode: .put, status: .ok, id: request.id, to: &output)
                case .waitingForDisk(let key, let value, let expiry):
                    queuePut(key: key, value: value, expiry: expiry, id: request.id, answer: answer)
                    return false
                case .tooLarge(let message):
                    appendMessage(message, status: .tooLarge, opcode: .put, id: request.id, to: &output)
                case .failed(let error):
                    appendMessage(error.message, status: .serverError, opcode: .put, id: request.id, to: &output)
                }
            case .delete:
                guard let key = try? CachetBodyDecoder.decodeKey(in: buffer, body: frame.body) else { return nil }
                switch commands.delete(UnsafeRawBufferPointer(rebasing: buffer[key]), now: now) {
                case .deleted: appendReply(opcode: .delete, status: .ok, id: request.id, to: &output)
                case .notFound:
                    let status: CachetStatus = standInHadIt ? .ok : .notFound
                    appendReply(opcode: .delete, status: status, id: request.id, to: &output)
                case .failed(let error):
                    appendMessage(error.message, status: .serverError, opcode: .delete, id: request.id, to: &output)
                }
            default:
                return nil
            }
            return true
        }
        switch applied {
        case true?: answer(Array(output.readableRegion))
        case false?: break
        case nil:
            // The frame was served once already, so it decodes; were it not to, nothing was applied.
            answer(reply(to: request, .unavailable("the write could not be read back to apply it", .refused)))
        }
    }

    /// The client's request a forward carries, as the client sent it: `forwarded` cleared, its id restored.
    private static func clientFrame(of request: ForwardRequest) -> [UInt8] {
        var frame = request.frame
        let flags = UInt16(frame[6]) << 8 | UInt16(frame[7])
        let cleared = flags & ~CachetRequestFlags.forwarded.rawValue
        frame[6] = UInt8(cleared >> 8)
        frame[7] = UInt8(truncatingIfNeeded: cleared)
        for index in 0..<4 { frame[8 + index] = UInt8(truncatingIfNeeded: request.id >> (24 - 8 * index)) }
        return frame
    }

    /// Serves `frame` (the write a refused confirmation was for, or a client's request whose owner refused
    /// the connection or left it unanswered at a graceful close) in this node's view, which now counts `request.owner` down: answered here (served as
    /// the stand-in, a miss, or refused), from the disk tier, or sent on to the member it is routed to now;
    /// a PUT that would wait for room in the disk queue is answered UNAVAILABLE, as the refusal would have
    /// been (nothing was applied).
    private func serveHere(
        _ frame: [UInt8],
        for request: ForwardRequest,
        retries: Int,
        answer: @escaping ([UInt8]) -> Void
    ) {
        var input = CachetByteBuffer(capacity: frame.count)
        frame.withUnsafeBytes { input.append($0) }
        var output = CachetByteBuffer(capacity: 256)
        // The client's connection already checked its user's rights.
        var access = ConnectionAccess.open
        // Timed where the client's connection waits for it.
        var tally = RequestTally()
        let result = processor.process(
            input: &input,
            output: &output,
            outputLimit: .max,
            now: CachetClock.now(),
            access: &access,
            tally: &tally,
            requestLimit: 1
        )
        switch result {
        case .needMoreBytes where output.readableBytes > 0, .yielded where output.readableBytes > 0:
            answer(Array(output.readableRegion))
        case .suspended(.forward(let again)):
            forwarder.forward(again) { [self] outcome in
                settle(again, outcome, retries: max(0, retries), answer: answer)
            }
        case .suspended(.rangedGet(let key, let id, let range)) where processor.commands.disk != nil:
            // Only the range's blocks, as for a connection's (``DiskDispatch``).
            let loop = forwarder.loop
            let onLoop = LoopConfined((processor, answer))
            processor.commands.disk.unsafelyUnwrapped.worker.getRange(
                key: key,
                offset: range.offset,
                length: range.length,
                limit: processor.rangeLimit,
                now: CachetClock.now()
            ) { read in
                loop.execute {
                    let (processor, answer) = onLoop.value
                    var output = CachetByteBuffer(capacity: 256)
                    processor.diskCompletions.completeRange(read, id: id, output: &output)
                    answer(Array(output.readableRegion))
                }
            }
        case .suspended(let operation) where processor.commands.disk != nil && operation.isGet:
            guard let key = operation.diskReadKey else { break }
            // The disk worker answers on its own thread; the reply is made back on this loop's queue.
            let loop = forwarder.loop
            let onLoop = LoopConfined((processor, answer))
            processor.commands.disk.unsafelyUnwrapped.worker.get(
                key: key,
                now: CachetClock.now(),
                maximumValueLength: processor.maximumPayloadLength - CachetProtocol.headerSize
            ) { entry in
                loop.execute {
                    let (processor, answer) = onLoop.value
                    var output = CachetByteBuffer(capacity: 256)
                    processor.diskCompletions.completeGet(
                        operation,
                        entry: entry,
                        output: &output,
                        now: CachetClock.now()
                    )
                    answer(Array(output.readableRegion))
                }
            }
        case .suspended(.put(let key, let value, let expiry, let id)) where processor.commands.disk != nil:
            // The disk queue is full: the write is answered once the queue takes it, as a connection's is.
            queuePut(key: key, value: value, expiry: expiry, id: id, answer: answer)
        default:
            logger.warning(
                "a request its owner did not take could not be served here either: answered UNAVAILABLE",
                metadata: ["cluster.member": "\(request.owner.id)", "request.outcome": "\(result)"]
            )
            answer(
                reply(
                    to: request,
                    .unavailable(
                        "\(request.owner.id) did not take the request and it could not be served here",
                        .refused
                    )
                )
            )
        }
    }

    /// Hands a PUT served here to the disk queue once it has room, then answers it (OK, or the disk tier's
    /// refusal).
    private func queuePut(
        key: [UInt8],
        value: [UInt8],
        expiry: UInt32,
        id: UInt32,
        answer: @escaping ([UInt8]) -> Void
    ) {
        guard let disk = processor.commands.disk else { return }
        let loop = forwarder.loop
        let onLoop = LoopConfined((self, answer))
        disk.worker.notifyWhenWritable {
            loop.execute {
                let (coordinator, answer) = onLoop.value
                let processor = coordinator.processor
                var output = CachetByteBuffer(capacity: 256)
                switch disk.worker.submitPut(key: key, value: value, expiry: expiry) {
                case .queued:
                    processor.diskCompletions.completePut(id: id, output: &output)
                case .full:
                    coordinator.queuePut(key: key, value: value, expiry: expiry, id: id, answer: answer)
                    return
                case .refused(let error):
                    processor.diskCompletions.refusePut(
                        key: key,
                        id: id,
                        error: error,
                        output: &output,
                        now: CachetClock.now()
                    )
                }
                answer(Array(output.readableRegion))
            }
        }
    }

    /// A GET, PUT or DEL for another member's key whose forward to `request.owner` was not applied (refused,
    /// or unanswered at a graceful close): the same request for the member the key is routed to now, or nil
    /// when that is not another member (this node stands in, or it waits: the request is then answered
    /// UNAVAILABLE as before). With `sameOwner`, `request.owner` itself may be the target again.
    private func rerouted(_ request: ForwardRequest, sameOwner: Bool) -> ForwardRequest? {
        guard request.opcode == .put || request.opcode == .delete || request.opcode == .get,
            let router, let cluster = processor.cluster,
            let key = request.key
        else { return nil }
        let placement = key.withUnsafeBytes { key -> Placement? in
            guard let owner = router.foreignOwner(of: key) else { return nil }
            return cluster.health.place(key, owner: owner) { cluster.hold?.isHoldingAfterAbsence() ?? false }
        }
        guard case .forward(let target)? = placement, sameOwner || target != request.owner else { return nil }
        RequestCounters.bump(processor.commands.counters.forwards)
        return ForwardRequest(frame: request.frame, opcode: request.opcode, id: request.id, owner: target)
    }

    /// A forward's outcome as the client's reply (its opcode and id restored).
    private func reply(to request: ForwardRequest, _ outcome: ForwardOutcome) -> [UInt8] {
        var reply: CachetByteBuffer
        if request.warmUp {
            reply = CachetByteBuffer(capacity: 256)
            processor.peerValues.unsafelyUnwrapped.completeWarmUp(request, outcome, output: &reply)
            return Array(reply.readableRegion)
        }
        switch outcome {
        case .answered(let status, let body) where request.confirmation:
            // The invalidation that confirms a peer's write: acknowledged, the write is (a PUT's value is
            // not kept: this node would not serve it); refused, the write is not acknowledged either.
            reply = CachetByteBuffer(capacity: 256)
            if status == .ok || status == .notFound {
                appendReply(
                    opcode: request.opcode,
                    status: request.opcode == .put ? .ok : status,
                    id: request.id,
                    to: &reply
                )
            } else {
                // The member's own reason, so that a refusal can be traced to the view that made it.
                let reason = body.isEmpty ? "" : ": " + String(decoding: body.prefix(300), as: UTF8.self)
                appendMessage(
                    "\(request.owner.id), where this node routes the key, did not take its invalidation (\(status)"
                        + reason + "); the write was not applied",
                    status: .unavailable,
                    opcode: request.opcode,
                    id: request.id,
                    to: &reply
                )
            }
        case .answered(let status, let body):
            reply = CachetByteBuffer(capacity: CachetProtocol.frameOverhead + body.count)
            body.withUnsafeBytes {
                appendReply(opcode: request.opcode, status: status, id: request.id, body: $0, to: &reply)
            }
        case .unavailable(let reason, _):
            RequestCounters.bump(processor.commands.counters.forwardFailures)
            logger.debug(
                "forward failed",
                metadata: ["cluster.member": "\(request.owner.id)", "error.message": "\(reason)"]
            )
            reply = CachetByteBuffer(capacity: 256)
            appendMessage(
                "the key's owner \(request.owner.id) is unavailable: \(reason)",
                status: .unavailable,
                opcode: request.opcode,
                id: request.id,
                to: &reply
            )
        }
        return Array(reply.readableRegion)
    }

    // MARK: - Cluster-wide CLEAR and STATS

    /// Sends a cluster-wide CLEAR or STATS to every member, this node included (through its own listener,
    /// like any member, so that its CLEAR goes through the disk queue as usual), each with the forward
    /// deadline; once all have answered or failed, calls `answer` with the aggregate reply's body
    /// (`Protocol/PROTOCOL.md`, "Cluster-wide CLEAR and STATS"), on the loop's queue.
    /// - Returns: false when this node has no router (it is not a cluster member): nothing was sent.
    func fanOut(_ request: ForwardRequest, answer: @escaping ([UInt8]) -> Void) -> Bool {
        guard let router else { return false }
        let (nodeID, membership) = router.everyone()
        let members = membership.members
        let answers = FanOutAnswers(count: members.count)
        for (index, member) in members.enumerated() {
            var frame = request.frame
            forwarder.forward(&frame, to: member) { outcome in
                answers.outcomes[index] = outcome
                answers.remaining -= 1
                guard answers.remaining == 0 else { return }
                let outcomes = answers.outcomes.map { $0 ?? .unavailable("no answer", .connectionFailed) }
                answer(
                    Self.aggregate(
                        request.opcode,
                        members: members,
                        outcomes: outcomes,
                        nodeID: nodeID,
                        clusterHash: membership.membershipHashText
                    )
                )
            }
        }
        return true
    }

    /// The body of a cluster-wide reply from every member's outcome, in ring order.
    static func aggregate(
        _ opcode: CachetOpcode,
        members: [CachetClusterMember],
        outcomes: [ForwardOutcome],
        nodeID: String,
        clusterHash: String
    ) -> [UInt8] {
        if opcode == .clear {
            let results = zip(members, outcomes).map { member, outcome -> CachetClusterClearReply.Member in
                switch outcome {
                case .answered(let status, let body) where status == .ok:
                    guard let result = try? CachetClearResult(decoding: body) else {
                        return .init(id: member.id, status: .serverError, message: "malformed CLEAR reply")
                    }
                    return .init(id: member.id, status: .ok, result: result)
                case .answered(let status, let body):
                    return .init(id: member.id, status: status, message: String(decoding: body, as: UTF8.self))
                case .unavailable(let reason, _):
                    return .init(id: member.id, status: .unavailable, message: reason)
                }
            }
            return CachetClusterClearReply(members: results).encoded
        }
        let results = zip(members, outcomes).map { member, outcome -> CachetClusterStatsReply.Member in
            switch outcome {
            case .answered(let status, let body):
                return .init(id: member.id, status: status, body: body)
            case .unavailable(let reason, _):
                return .init(id: member.id, status: .unavailable, body: Array(reason.utf8))
            }
        }
        return CachetClusterStatsReply(answeredBy: nodeID, clusterHash: clusterHash, members: results).encoded
    }
}
