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
        var frame = request.frame
        forwarder.forward(&frame, to: request.owner) { [self] outcome in
            resume(connection) { processor, output, _ in
                switch outcome {
                case .answered(let status, let body):
                    body.withUnsafeBytes {
                        appendReply(opcode: request.opcode, status: status, id: request.id, body: $0, to: &output)
                    }
                case .unavailable(let reason):
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
    }
}
