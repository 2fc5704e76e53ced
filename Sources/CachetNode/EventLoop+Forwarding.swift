import CachetCluster
import CachetStore
import CachetWire

/// Forwarding: a request for a key another member owns goes to that member over the loop's peer
/// connections (``PeerForwarder``); its reply, or UNAVAILABLE, is written back with the client's opcode
/// and id, and the connection carries on with the requests behind it.
extension EventLoop {
    /// Sends a request on to its owner; the connection waits for the outcome (its completion runs on this
    /// loop's queue, which the peer connections share).
    func startForward(_ request: ForwardRequest, for connection: Connection) {
        guard let forwarder else {
            // Only a node with a router forwards, and every such node has a forwarder.
            resume(connection) { _, output, _ in
                appendMessage(
                    "forwarding is not set up",
                    status: .serverError,
                    opcode: request.opcode,
                    id: request.id,
                    to: &output
                )
            }
            return
        }
        // GETs of one key in the air at once share one request (singleflight); each is answered here.
        let collapsed = forwarder.forward(request) { [self] outcome in
            resume(connection) { processor, output, _ in
                switch outcome {
                case .answered(let status, let body):
                    body.withUnsafeBytes {
                        appendReply(opcode: request.opcode, status: status, id: request.id, body: $0, to: &output)
                    }
                case .unavailable(let reason, _):
                    RequestCounters.bump(processor.counters.forwardFailures)
                    logger.debug(
                        "forward failed",
                        metadata: ["cluster.member": "\(request.owner.id)", "error.message": "\(reason)"]
                    )
                    appendMessage(
                        "the key's owner \(request.owner.id) is unavailable: \(reason)",
                        status: .unavailable,
                        opcode: request.opcode,
                        id: request.id,
                        to: &output
                    )
                }
            }
        }
        if collapsed { RequestCounters.bump(processor.counters.forwardsCollapsed) }
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

extension EventLoop {
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
