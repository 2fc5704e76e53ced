import Synchronization

/// A snapshot of request counters summed over every loop.
struct RequestCounts {
    var gets = 0
    var hits = 0
    var misses = 0
    var puts = 0
    var deletes = 0
    var diskHits = 0
    var badRequests = 0
    var forwards = 0
    var forwardsCollapsed = 0
    var forwardFailures = 0
    var routingDisagreements = 0
    var minorityMisses = 0

    mutating func add(_ counters: RequestCounters) {
        gets += counters.gets.load(ordering: .relaxed)
        hits += counters.hits.load(ordering: .relaxed)
        misses += counters.misses.load(ordering: .relaxed)
        puts += counters.puts.load(ordering: .relaxed)
        deletes += counters.deletes.load(ordering: .relaxed)
        diskHits += counters.diskHits.load(ordering: .relaxed)
        badRequests += counters.badRequests.load(ordering: .relaxed)
        forwards += counters.forwards.load(ordering: .relaxed)
        forwardsCollapsed += counters.forwardsCollapsed.load(ordering: .relaxed)
        forwardFailures += counters.forwardFailures.load(ordering: .relaxed)
        routingDisagreements += counters.routingDisagreements.load(ordering: .relaxed)
        minorityMisses += counters.minorityMisses.load(ordering: .relaxed)
    }
}
