import CachetCluster
import CachetIO
import CachetStore
import CachetWire

/// Forwarding: a request for a key another member owns goes to that member over the loop's peer
/// connections (``PeerForwarder``); its reply, or UNAVAILABLE, is written back with the client's opcode
/// and id. While forwards are in flight the connection goes on answering (and forwarding) the requests
/// behind them, holding their replies in request order (``ForwardPipeline``).
extension NodeIOQueue {
    /// Sends a request on to its owner and reserves its reply's place in the connection's
    /// ``ForwardPipeline`` (made if the connection has none). Called while the connection's input is being
    /// processed: the caller goes on with the requests behind it (``processHeld(_:now:)``). The completion
    /// runs on this loop's queue, which the peer connections share, possibly before this returns (an owner
    /// marked down).
    func startForward(_ request: ForwardRequest, for connection: Connection) {
        let pipeline: ForwardPipeline
        if let existing = connection.forwards {
            pipeline = existing
        } else {
            pipeline = ForwardPipeline()
            connection.forwards = pipeline
        }
        let slot = pipeline.reserveForward(releasingTo: &connection.output)
        pipeline.processing = true
        defer { pipeline.processing = false }
        guard let forwarder else {
            // Only a node with a router forwards, and every such node has a forwarder.
            var reply = CachetByteBuffer(capacity: 256)
            appendMessage(
                "forwarding is not set up",
                status: .serverError,
                opcode: request.opcode,
                id: request.id,
                to: &reply
            )
            completeForward(Array(reply.readableRegion), slot: slot, pipeline: pipeline, connection: connection)
            return
        }
        // GETs of one key in the air at once share one request (singleflight); each is answered here.
        let collapsed = forwarder.forward(request) { [self] outcome in
            guard connection.forwards === pipeline else {
                // The connection closed meanwhile: nobody waits for this reply.
                return
            }
            // A confirmation refused (the member's port is closed: it serves no copy, and is now marked
            // down) leaves the write to this node's view again: most often served here as the stand-in.
            if case .unavailable(_, .refused) = outcome, request.confirmation {
                serveAfterRefusedConfirmation(request, slot: slot, pipeline: pipeline, connection: connection)
                return
            }
            // A write refused before it was sent (the member's port is closed: it is gone, now marked down)
            // goes, once, to where the key is routed now.
            if case .unavailable(_, .refused) = outcome, let next = rerouted(request) {
                forwarder.forward(next) { [self] outcome in
                    answerForward(request, outcome, slot: slot, pipeline: pipeline, connection: connection)
                }
                return
            }
            answerForward(request, outcome, slot: slot, pipeline: pipeline, connection: connection)
        }
        if collapsed { RequestCounters.bump(processor.counters.forwardsCollapsed) }
    }

    /// The write a refused confirmation was for, routed again in this node's view, which now counts
    /// `request.owner` down: answered here (served as the stand-in, or refused), or confirmed once more with
    /// the member it is routed to now; anything that would wait for more (the disk queue) is answered
    /// UNAVAILABLE, as the refusal would have been.
    private func serveAfterRefusedConfirmation(
        _ request: ForwardRequest,
        slot: CachetReplyOrder<[UInt8]>.Slot,
        pipeline: ForwardPipeline,
        connection: Connection
    ) {
        var input = CachetByteBuffer(capacity: request.original.count)
        request.original.withUnsafeBytes { input.append($0) }
        var output = CachetByteBuffer(capacity: 256)
        let result = processor.process(
            input: &input,
            output: &output,
            outputLimit: .max,
            now: CachetClock.now(),
            requestLimit: 1
        )
        switch result {
        case .needMoreBytes where output.readableBytes > 0, .yielded where output.readableBytes > 0:
            completeForward(Array(output.readableRegion), slot: slot, pipeline: pipeline, connection: connection)
        case .suspended(.forward(let again)) where again.confirmation && forwarder != nil:
            forwarder.unsafelyUnwrapped.forward(again) { [self] outcome in
                answerForward(again, outcome, slot: slot, pipeline: pipeline, connection: connection)
            }
        default:
            answerForward(
                request,
                .unavailable(
                    "\(request.owner.id) refused the connection and the write could not be served here",
                    .refused
                ),
                slot: slot,
                pipeline: pipeline,
                connection: connection
            )
        }
    }

    /// A write (PUT or DEL) for another member's key whose forward to `request.owner` was refused: the same
    /// request for the member the key is routed to now, or nil when that is not another member (this node
    /// stands in, or it waits: the request is then answered UNAVAILABLE as before).
    private func rerouted(_ request: ForwardRequest) -> ForwardRequest? {
        guard request.opcode == .put || request.opcode == .delete, let router, let cluster = processor.cluster,
            let key = PeerForwarder.key(of: request)
        else { return nil }
        let placement = key.withUnsafeBytes { key -> NodeHealth.Placement? in
            guard let owner = router.foreignOwner(of: key) else { return nil }
            return cluster.health.place(key, owner: owner) { cluster.hold?.isHoldingAfterAbsence() ?? false }
        }
        guard case .forward(let target)? = placement, target != request.owner else { return nil }
        RequestCounters.bump(processor.counters.forwards)
        return ForwardRequest(frame: request.frame, opcode: request.opcode, id: request.id, owner: target)
    }

    /// Writes a forward's outcome as the client's reply (its opcode and id restored).
    private func answerForward(
        _ request: ForwardRequest,
        _ outcome: ForwardOutcome,
        slot: CachetReplyOrder<[UInt8]>.Slot,
        pipeline: ForwardPipeline,
        connection: Connection
    ) {
        guard connection.forwards === pipeline else { return }
        var reply: CachetByteBuffer
        switch outcome {
        case .answered(let status, _) where request.confirmation:
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
                appendMessage(
                    "\(request.owner.id), where this node routes the key, did not take its invalidation (\(status)); "
                        + "the write was not applied",
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
            RequestCounters.bump(processor.counters.forwardFailures)
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
        completeForward(Array(reply.readableRegion), slot: slot, pipeline: pipeline, connection: connection)
    }

    /// A forward's reply: fills its slot, moves the replies now at the front to the output (and drops the
    /// pipeline once nothing is in flight), charges what is still held to the budget, then, unless the
    /// connection is being processed now, sends and carries on with the requests behind (a connection that
    /// stopped reading for its forwards reads again).
    private func completeForward(
        _ reply: [UInt8],
        slot: CachetReplyOrder<[UInt8]>.Slot,
        pipeline: ForwardPipeline,
        connection: Connection
    ) {
        // Closed (`connectionClosed` drops the pipeline): nothing is written to a dead connection.
        guard connection.forwards === pipeline, !connection.isClosed else { return }
        pipeline.fill(slot, with: reply, releasingTo: &connection.output)
        if pipeline.isEmpty {
            connection.dropForwards()
        } else {
            connection.chargeForwards()
        }
        if pipeline.processing { return }
        let now = CachetClock.now()
        if case .waitingForForwards = connection.phase {
            connection.phase = .reading(frameLength: 0)
            process(connection, now: now)
        } else {
            guard send(connection) else { return }
        }
        settle(connection, now: now)
    }

    /// ``process(_:now:)`` for a connection with forwards in flight: answers the whole frames in the input
    /// into the pipeline's pending replies (forwarding those that go to another member), until the input
    /// is used up, a bound is reached (``ForwardPipeline/maximumInFlight``, ``ForwardPipeline/heldLimit``,
    /// the budget's share for replies, the output limit), or a request must wait for the disk or a
    /// fan-out (as without forwards: the connection stops until it completes). Leaves the connection in
    /// the phase the input calls for; sends nothing (``process(_:now:)`` does).
    /// - Returns: true when the last forward has answered meanwhile (at once: its owner marked down) and
    ///   the connection is still reading: the caller goes on processing as usual.
    func processHeld(_ connection: Connection, now: UInt32) -> Bool {
        var yielded = false
        processing: while let pipeline = connection.forwards {
            let replyRoom = memory.replyRoom
            if pipeline.inFlight >= ForwardPipeline.maximumInFlight || pipeline.heldBytes > ForwardPipeline.heldLimit
                || replyRoom == 0
            {
                connection.phase = .waitingForForwards
                break
            }
            if connection.output.readableBytes > pendingOutputLimit(connection, room: replyRoom) {
                connection.phase = .waitingForOutput
                break
            }
            let result = processor.process(
                input: &connection.input,
                output: &pipeline.pending,
                outputLimit: min(
                    ForwardPipeline.heldLimit - pipeline.filledBytes,
                    pipeline.pending.capacity + replyRoom
                )
                    - 2048,
                outputCapacityLimit: max(
                    pipeline.pending.capacity + replyRoom,
                    pipeline.pending.readableBytes == 0 ? ConnectionMemory.fairAllowance : 0
                ),
                now: now,
                // Never straight to the socket: earlier replies are still held.
                directSend: nil,
                requestLimit: Self.requestsPerTurn
            )
            switch result {
            case .needMoreBytes(let frameLength):
                if frameLength == 0 { connection.requestsTaken &+= 1 }
                connection.phase = .reading(frameLength: frameLength)
                break processing
            case .outputFull:
                // The held replies reached their bound: the forwards' answers release them.
                connection.phase = .waitingForForwards
                break processing
            case .memoryFull:
                connection.phase = .waitingForMemory(.reply)
                break processing
            case .closeAfterReply:
                beginClosing(connection)
                break processing
            case .suspended(.forward(let request)):
                startForward(request, for: connection)
                connection.chargeForwards()
            case .suspended(let operation):
                wait(for: operation, connection)
                break processing
            case .receivingValue(let direct):
                connection.phase = .receivingValue(direct)
                break processing
            case .yielded:
                connection.phase = .reading(frameLength: 0)
                yieldTurn(connection)
                yielded = true
                break processing
            }
        }
        guard connection.forwards == nil else {
            connection.chargeForwards()
            return false
        }
        if case .reading = connection.phase, !yielded { return true }
        return false
    }
}

/// The answers of a fan-out, gathered on the loop as they come.
private final class FanOutAnswers {
    var outcomes: [ForwardOutcome?]
    var remaining: Int

    init(count: Int) {
        outcomes = Array(repeating: nil, count: count)
        remaining = count
    }
}

extension NodeIOQueue {
    /// Sends a cluster-wide CLEAR or STATS to every member, this node included (through its own listener,
    /// like any member, so that its CLEAR goes through the disk queue as usual), each with the forward
    /// deadline; once all have answered or failed, writes the aggregate reply (`Protocol/PROTOCOL.md`,
    /// "Cluster-wide CLEAR and STATS").
    func startFanOut(_ request: ForwardRequest, for connection: Connection) {
        guard let forwarder, let router else {
            resume(connection) { _, output, _ in
                appendMessage(
                    "cluster-wide requests are not set up",
                    status: .serverError,
                    opcode: request.opcode,
                    id: request.id,
                    to: &output
                )
            }
            return
        }
        let (nodeID, membership) = router.everyone()
        let members = membership.members
        let answers = FanOutAnswers(count: members.count)
        for (index, member) in members.enumerated() {
            var frame = request.frame
            forwarder.forward(&frame, to: member) { [self] outcome in
                answers.outcomes[index] = outcome
                answers.remaining -= 1
                guard answers.remaining == 0 else { return }
                let outcomes = answers.outcomes.map { $0 ?? .unavailable("no answer", .connectionFailed) }
                let body = Self.aggregate(
                    request.opcode,
                    members: members,
                    outcomes: outcomes,
                    nodeID: nodeID,
                    clusterHash: membership.membershipHashText
                )
                resume(connection) { _, output, _ in
                    body.withUnsafeBytes {
                        appendReply(opcode: request.opcode, status: .ok, id: request.id, body: $0, to: &output)
                    }
                }
            }
        }
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
