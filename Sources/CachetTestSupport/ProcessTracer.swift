public import InMemoryTracing
import Tracing

/// The tracer of a test process: an `InMemoryTracer` bootstrapped as the process's tracer the first time
/// it is asked for (a process bootstraps once). Clients made afterwards report their spans to it, so a
/// test finds its own spans among them by their names or parents.
public enum ProcessTracer {
    /// The process's in-memory tracer.
    public static let shared: InMemoryTracer = {
        let tracer = InMemoryTracer()
        InstrumentationSystem.bootstrap(tracer)
        return tracer
    }()

    /// The finished server span of the HTTP request for `path` (its `url.path` attribute, as the
    /// frameworks' tracing middlewares set it), and the client spans whose parent it is; nil when there is
    /// no such server span.
    /// - Parameter path: the request's path, such as `/traced/1`.
    public static func requestSpans(path: String) -> (
        server: FinishedInMemorySpan, clients: [FinishedInMemorySpan], all: [FinishedInMemorySpan]
    )? {
        let spans = shared.finishedSpans
        guard
            let server = spans.first(where: {
                $0.kind == .server && $0.attributes["url.path"]?.toSpanAttribute() == .string(path)
            })
        else { return nil }
        return (server, spans.filter { $0.kind == .client && $0.parentSpanID == server.spanID }, spans)
    }
}
