import CachetWire
import Synchronization

/// Request counters of one event loop. Only that loop's queue adds to them (relaxed atomics, so no cache
/// line is shared between loops); STATS reads and sums them from any queue.
final class RequestCounters: Sendable {
    let gets = Atomic<Int>(0)
    let hits = Atomic<Int>(0)
    let misses = Atomic<Int>(0)
    let puts = Atomic<Int>(0)
    let deletes = Atomic<Int>(0)
    let diskHits = Atomic<Int>(0)
    let badRequests = Atomic<Int>(0)
    /// Requests sent on to the member that owns their key.
    let forwards = Atomic<Int>(0)
    /// Forwarded GETs that shared the request of an earlier GET of the same key still in the air (sent
    /// nothing of their own; counted in ``forwards`` too).
    let forwardsCollapsed = Atomic<Int>(0)
    /// Forwards answered UNAVAILABLE here: the owner refused, failed, or did not answer in time.
    let forwardFailures = Atomic<Int>(0)
    /// Requests marked `forwarded` for a key this node does not own (served here all the same).
    let routingDisagreements = Atomic<Int>(0)
    /// Requests for this node's own keys answered here with a miss (GET) or refused (PUT, DEL) because it
    /// was in the minority (not those sent on to a stand-in, which are in ``forwards``).
    let minorityMisses = Atomic<Int>(0)
    /// How long requests take, by command.
    let latencies = RequestLatencies()

    @inline(__always)
    static func bump(_ counter: borrowing Atomic<Int>) {
        counter.wrappingAdd(1, ordering: .relaxed)
    }
}
