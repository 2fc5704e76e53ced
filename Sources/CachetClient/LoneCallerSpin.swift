import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// How a call that is the client's only one waits for its reply: it spins on its own thread, yielding
/// the core at every turn, for a short while after sending, so that a reply arriving meanwhile resumes
/// its continuation before the task suspends.
///
/// Why: a continuation resumed before its task suspends lets the task go on at once on its own thread.
/// One resumed later, by the event loop's thread, enqueues the task on the global executor from there,
/// which on Linux costs two Dispatch allocations (Dispatch's continuation cache is per thread, and the loop
/// thread only ever takes from it: the continuations are freed by the workers that run the task) and the
/// wake-up of a worker thread: most of a lone caller's heap allocations per request and a good part of its
/// latency (BENCHMARKS.md, "Figures behind choices in the code").
///
/// When: spinning pays only when the reply comes soon and nobody else needs the core. So a call spins only
/// when no other call of the client (single keys, batches, per-node commands) is in flight as it begins,
/// and only while the recent lone calls were answered within ``spinningAverageLimit`` (half of
/// `Configuration.maximumSpin`) on average; it spins for at most twice that average (plus
/// ``budgetSlack``), never longer than ``maximumBudget`` (`maximumSpin`), and then suspends as any other
/// call. A client whose node is far (a network round trip above the limit) or slow never spins; a busy
/// client (many tasks) never spins either, since its calls overlap.
///
/// Nothing but the waiting changes: the request, its timeout and its cancellation are the slot's as
/// before, and the spin ends early when the call is answered, cancelled or failed.
///
/// `Sendable` through atomics; the average is updated without a lock (a lost update only delays it).
final class LoneCallerSpin: Sendable {
    /// Calls in flight: single keys, batches and per-node commands.
    private let inFlight = Atomic<Int>(0)
    /// The moving average (weight 1/8) of the latency of calls that began alone, in nanoseconds.
    private let averageNanoseconds: Atomic<Int>
    /// Lone calls spin only while their average latency is at most this (half of ``maximumBudget``).
    let spinningAverageLimit: UInt64
    /// The longest spin, in nanoseconds; 0 never spins.
    let maximumBudget: UInt64
    /// Added to twice the average (20 µs).
    static let budgetSlack: UInt64 = 20_000

    /// Creates the state of one client.
    /// - Parameter maximumSpin: the longest spin (`Configuration.maximumSpin`); zero never spins.
    init(maximumSpin: Duration) {
        maximumBudget = maximumSpin.nanoseconds
        spinningAverageLimit = maximumBudget / 2
        averageNanoseconds = Atomic(Int(maximumBudget / 4))
    }

    /// A call begins.
    /// - Returns: whether it is the only one in flight (then it reports its latency to ``end(lone:began:)``),
    ///   and how long it may spin for its reply, in nanoseconds (0: it must not spin). With spinning turned
    ///   off (`maximumSpin` zero) nothing is counted: never lone, never a spin.
    @inline(__always)
    func begin() -> (lone: Bool, budget: UInt64) {
        // Spinning off: nothing to count (``end(lone:began:)`` and ``counting(_:)`` skip it too).
        guard maximumBudget > 0 else { return (false, 0) }
        guard inFlight.wrappingAdd(1, ordering: .relaxed).oldValue == 0 else { return (false, 0) }
        let average = UInt64(max(0, averageNanoseconds.load(ordering: .relaxed)))
        guard average <= spinningAverageLimit else { return (true, 0) }
        return (true, min(maximumBudget, 2 * average + Self.budgetSlack))
    }

    /// A call that began with ``begin()`` ended.
    /// - Parameters:
    ///   - lone: what ``begin()`` said.
    ///   - began: the monotonic time at which it began (read only for a lone call).
    @inline(__always)
    func end(lone: Bool, began: UInt64) {
        guard maximumBudget > 0 else { return }
        inFlight.wrappingSubtract(1, ordering: .relaxed)
        guard lone else { return }
        let elapsed = Int(clamping: monotonicNanoseconds() &- began)
        let average = averageNanoseconds.load(ordering: .relaxed)
        averageNanoseconds.store(average + (elapsed - average) / 8, ordering: .relaxed)
    }

    /// Counts a call that never spins (a batch, a per-node command) for as long as `body` runs, so that a
    /// lone call beside it does not spin.
    func counting<Result>(_ body: () async -> Result) async -> Result {
        guard maximumBudget > 0 else { return await body() }
        inFlight.wrappingAdd(1, ordering: .relaxed)
        defer { inFlight.wrappingSubtract(1, ordering: .relaxed) }
        return await body()
    }

    /// Spins until `answered()` is true or `budget` nanoseconds have passed, yielding the core at every
    /// turn (to the node or the event loop, when they share it).
    @inline(__always)
    static func spin(budget: UInt64, until answered: () -> Bool) {
        let end = monotonicNanoseconds() &+ budget
        while !answered() {
            if monotonicNanoseconds() >= end { return }
            sched_yield()
        }
    }

    /// The current average, for tests.
    var average: UInt64 { UInt64(max(0, averageNanoseconds.load(ordering: .relaxed))) }
}
