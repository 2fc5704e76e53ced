import CachetWire
import Tracing

/// A span per keyed request (swift-distributed-tracing), when the app bootstrapped a tracer or gave the
/// client one: named after the operation as the protocol names it (`GET`, `PUT`, `DEL`), a child of the caller's
/// `ServiceContext.current` (the request span of a Vapor or Hummingbird handler), of kind `client`.
///
/// Attributes, after OpenTelemetry's database conventions where they have one:
/// - `db.system.name` `cachet`, `db.operation.name` the operation;
/// - `server.address`, `server.port` and `cachet.node` (its id) of the node that answered, or last failed;
/// - `cachet.status` the node's status (`OK`, `NOT_FOUND`, ...), `cachet.attempts` the nodes tried (more
///   than 1: retried), `cachet.failover` true when a node other than the key's owner answered;
/// - a failure is recorded as the span's error with status `error`; a NOT_FOUND is not a failure.
///
/// Keys and values are not recorded (they may be personal data). Without a tracer nothing here runs: the
/// only cost is testing that the tracer is nil (BENCHMARKS.md, "Tracing").
extension CachetClient {
    /// ``measured(key:value:opcode:ttl:lease:attempts:)`` inside a span of `tracer`.
    func traced(
        _ tracer: any Tracer,
        key: some Collection<UInt8>,
        value: some Collection<UInt8>,
        opcode: CachetOpcode,
        ttl: UInt32,
        lease: ClientLease
    ) async throws(CachetClientError) -> (CachetStatus, [UInt8], String) {
        let operation = opcode.description
        let span = tracer.startSpan(operation, context: ServiceContext.current ?? .topLevel, ofKind: .client)
        defer { span.end() }
        span.attributes["db.system.name"] = "cachet"
        span.attributes["db.operation.name"] = operation
        var attempts = 0
        do {
            let result = try await measured(
                key: key,
                value: value,
                opcode: opcode,
                ttl: ttl,
                lease: lease,
                attempts: &attempts
            )
            annotate(span, node: result.2, attempts: attempts, key: key)
            span.attributes["cachet.status"] = "\(result.0)"
            return result
        } catch {
            annotate(span, node: error.node, attempts: attempts, key: key)
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error, message: error.code.description))
            throw error
        }
    }

    /// The node, the attempts and whether another node than the key's owner answered.
    private func annotate(_ span: any Span, node id: String?, attempts: Int, key: some Collection<UInt8>) {
        span.attributes["cachet.attempts"] = attempts
        guard let id else { return }
        span.attributes["cachet.node"] = id
        // The members in force (a membership refresh may have added the node since the configuration).
        if let node = topology.members.first(where: { $0.id == id }) {
            span.attributes["server.address"] = node.host
            span.attributes["server.port"] = node.port
        }
        span.attributes["cachet.failover"] = owner(of: Array(key)).id != id
    }
}
