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
}
