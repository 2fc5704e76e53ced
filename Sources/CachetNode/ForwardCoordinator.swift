import CachetCluster
import CachetIO
import CachetStore
import CachetWire
import Logging

/// What a node does with a request another member answers (`Protocol/CLUSTER.md`, "Forwarding"): it sends
/// the request on through the loop's peer connections (``PeerForwarder``), decides what a refusal leads to
/// (a write refused before it was sent goes once to where the key is routed now; a refused confirmation is
/// served again in this node's view), and turns the outcome into the client's reply, its opcode and id
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
            // A confirmation refused (the member's port is closed: it serves no copy, and is now marked
            // down) leaves the write to this node's view again: most often served here as the stand-in.
            if case .unavailable(_, .refused) = outcome, request.confirmation {
                serveAfterRefusedConfirmation(request, answer: answer)
                return
            }
            // A write refused before it was sent (the member's port is closed: it is gone, now marked down)
            // goes, once, to where the key is routed now.
            if case .unavailable(_, .refused) = outcome, let next = rerouted(request) {
                forwarder.forward(next) { [self] outcome in answer(reply(to: request, outcome)) }
                return
            }
            answer(reply(to: request, outcome))
        }
        if collapsed { RequestCounters.bump(processor.counters.forwardsCollapsed) }
    }

    /// The write a refused confirmation was for, routed again in this node's view, which now counts
    /// `request.owner` down: answered here (served as the stand-in, or refused), or confirmed once more with
    /// the member it is routed to now; anything that would wait for more (the disk queue) is answered
    /// UNAVAILABLE, as the refusal would have been.
    private func serveAfterRefusedConfirmation(_ request: ForwardRequest, answer: @escaping ([UInt8]) -> Void) {
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
            answer(Array(output.readableRegion))
        case .suspended(.forward(let again)) where again.confirmation:
            forwarder.forward(again) { [self] outcome in answer(reply(to: again, outcome)) }
        default:
            answer(
                reply(
                    to: request,
                    .unavailable(
                        "\(request.owner.id) refused the connection and the write could not be served here",
                        .refused
                    )
                )
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

    /// A forward's outcome as the client's reply (its opcode and id restored).
    private func reply(to request: ForwardRequest, _ outcome: ForwardOutcome) -> [UInt8] {
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

/// The answers of a fan-out, gathered on the loop as they come.
private final class FanOutAnswers {
    var outcomes: [ForwardOutcome?]
    var remaining: Int

    init(count: Int) {
        outcomes = Array(repeating: nil, count: count)
        remaining = count
    }
}
