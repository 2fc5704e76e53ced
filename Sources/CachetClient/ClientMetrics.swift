import CachetWire
import CoreMetrics

/// What CachetClient reports through swift-metrics, to the factory it was given (by default whatever
/// backend the app bootstrapped with `MetricsSystem.bootstrap`; none: swift-metrics' no-op handlers):
///
/// - `cachet_client_requests_total{operation, outcome}` (counter): GET, PUT and DEL by outcome: `ok`,
///   `not_found`, or the error's code (`timeout`, `unavailable`, `forbidden`...);
/// - `cachet_client_request_duration_seconds{operation}` (timer): from the call to its answer, failover
///   included;
/// - `cachet_client_node_up{node}` (gauge): 1 while the node is routed to, 0 while it is marked down.
///
/// Every counter and timer is made once, with the client: a request only increments and records.
final class ClientMetrics: @unchecked Sendable {
    /// The outcomes a request is counted under, in order: `ok`, `not_found`, then each error code.
    static let outcomes: [String] = [
        "ok", "not_found", "timeout", "connection_failed", "unavailable", "too_large", "bad_request",
        "server_error", "protocol_violation", "shutdown", "cancelled", "invalid_configuration",
        "not_authenticated", "forbidden",
    ]
    static let operations: [(CachetOpcode, String)] = [(.get, "get"), (.put, "put"), (.delete, "delete")]

    private let counters: [[Counter]]
    private let timers: [Timer]
    private let factory: any MetricsFactory

    /// - Parameter factory: where the metrics go.
    init(factory: any MetricsFactory) {
        self.factory = factory
        counters = Self.operations.map { _, operation in
            Self.outcomes.map { outcome in
                Counter(
                    label: "cachet_client_requests_total",
                    dimensions: [("operation", operation), ("outcome", outcome)],
                    factory: factory
                )
            }
        }
        timers = Self.operations.map { _, operation in
            Timer(
                label: "cachet_client_request_duration_seconds",
                dimensions: [("operation", operation)],
                factory: factory
            )
        }
    }

    /// Records one request of `opcode` (GET, PUT or DEL) that took `nanoseconds` and ended with `outcome`
    /// (an index into ``outcomes``).
    @inline(__always)
    func record(_ opcode: CachetOpcode, outcome: Int, nanoseconds: UInt64) {
        let operation = opcode == .get ? 0 : opcode == .put ? 1 : 2
        counters[operation][outcome].increment()
        timers[operation].recordNanoseconds(Int64(truncatingIfNeeded: nanoseconds))
    }

    /// The outcome index of a reply's status (OK or NOT_FOUND; anything else is an error's code).
    static func outcome(of status: CachetStatus) -> Int? {
        switch status {
        case .ok: return 0
        case .notFound: return 1
        default: return nil
        }
    }

    /// The outcome index of an error.
    static func outcome(of error: CachetClientError) -> Int {
        switch error.code {
        case .timeout: return 2
        case .connectionFailed: return 3
        case .unavailable: return 4
        case .tooLarge: return 5
        case .badRequest: return 6
        case .protocolViolation: return 8
        case .shutdown: return 9
        case .cancelled: return 10
        case .invalidConfiguration: return 11
        case .notAuthenticated: return 12
        case .forbidden: return 13
        default: return 7
        }
    }

    /// Reports whether `node` is routed to (1) or marked down (0).
    func nodeState(_ node: String, up: Bool) {
        Gauge(label: "cachet_client_node_up", dimensions: [("node", node)], factory: factory).record(up ? 1 : 0)
    }
}
