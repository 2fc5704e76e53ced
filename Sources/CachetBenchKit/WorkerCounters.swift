import CachetLocking
import Histogram
import Synchronization

/// What one load thread publishes for the progress line: counters added every few milliseconds, and the
/// latencies of the last moments, handed over a few times a second.
final class WorkerCounters: Sendable {
    let replies = Atomic<Int>(0)
    let hits = Atomic<Int>(0)
    let misses = Atomic<Int>(0)
    let errors = Atomic<Int>(0)
    let verificationErrors = Atomic<Int>(0)
    /// The latencies of the current progress interval, added by a load thread and taken by the progress
    /// reporter.
    let recent = CachetLock(makeLatencyHistogram())

    /// Zeroes everything before a phase.
    func reset() {
        replies.store(0, ordering: .relaxed)
        hits.store(0, ordering: .relaxed)
        misses.store(0, ordering: .relaxed)
        errors.store(0, ordering: .relaxed)
        verificationErrors.store(0, ordering: .relaxed)
        recent.withLock { $0.reset() }
    }
}
