import CachetWire

/// What became of a forwarded request.
enum ForwardOutcome {
    /// The owner answered with this status and body (the client's opcode and id are restored by the
    /// caller).
    case answered(status: CachetStatus, body: [UInt8])
    /// No answer, and why (the message names the member).
    case unavailable(String, Cause)

    /// Why a forward got no answer; the first three count against the member's health.
    enum Cause {
        /// The deadline passed.
        case timedOut
        /// The connection failed (reset, or a bad reply); the request may have been sent.
        case connectionFailed
        /// The member closed the connection (FIN) without answering: a member that stops gracefully applies
        /// nothing it did not answer, so the request may go elsewhere (a crash may have applied it; a
        /// PUT or DEL sent again is the same write).
        case closed
        /// The connection was refused: the request was never sent (the member's port is closed).
        case refused
        /// Too many forwards were in flight to the member already.
        case overloaded
        /// The member is marked down: it was not asked.
        case markedDown
    }

    /// The outcome's name in `/metrics` (`cachet_forward_outcomes_total{outcome}`).
    var metricName: String {
        switch self {
        case .answered: "answered"
        case .unavailable(_, .timedOut): "timed_out"
        case .unavailable(_, .connectionFailed): "connection_failed"
        case .unavailable(_, .closed): "closed"
        case .unavailable(_, .refused): "refused"
        case .unavailable(_, .overloaded): "overloaded"
        case .unavailable(_, .markedDown): "marked_down"
        }
    }
}
