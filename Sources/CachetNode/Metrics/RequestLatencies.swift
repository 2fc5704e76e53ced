import Synchronization

/// How long requests take on one event loop, by command, as Prometheus histograms: from the turn that
/// read a request's bytes to its reply handed to the socket (a request that waits for the disk tier, a
/// peer or a fan-out: until its reply is written, after the wait). Only that loop's queue adds (relaxed
/// atomics, one turn at a time, not one request); `/metrics` sums the loops at scrape time.
final class RequestLatencies: @unchecked Sendable {
    /// The buckets' upper bounds, in nanoseconds: 25 µs to 1 s.
    static let bounds: [UInt64] = [
        25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000,
        50_000_000, 100_000_000, 250_000_000, 500_000_000, 1_000_000_000,
    ]
    /// Per command: a count per bucket (not cumulative), one past the last bound, then the sum of
    /// durations in nanoseconds.
    private static let cellsPerCommand = bounds.count + 2
    /// Written only on the loop's queue, read from any; atomics, so no read is torn. `@unchecked` for the
    /// pointer: the cells are allocated once, never moved, and freed with the object.
    private let cells: UnsafeMutablePointer<Atomic<Int>>
    private static let cellCount = LatencyCommand.allCases.count * cellsPerCommand

    init() {
        cells = .allocate(capacity: Self.cellCount)
        for index in 0..<Self.cellCount { (cells + index).initialize(to: Atomic(0)) }
    }

    deinit {
        cells.deinitialize(count: Self.cellCount)
        cells.deallocate()
    }

    /// Counts `count` requests of `command` that took `nanoseconds` each.
    func observe(_ command: LatencyCommand, count: Int = 1, nanoseconds: UInt64) {
        guard count > 0 else { return }
        var bucket = 0
        while bucket < Self.bounds.count && nanoseconds > Self.bounds[bucket] { bucket += 1 }
        let base = command.rawValue * Self.cellsPerCommand
        cells[base + bucket].wrappingAdd(count, ordering: .relaxed)
        cells[base + Self.cellsPerCommand - 1].wrappingAdd(
            count &* Int(truncatingIfNeeded: nanoseconds),
            ordering: .relaxed
        )
    }

    /// Counts a turn's requests, each with the turn's duration.
    func observe(_ tally: RequestTally, nanoseconds: UInt64) {
        observe(.get, count: tally.get, nanoseconds: nanoseconds)
        observe(.set, count: tally.set, nanoseconds: nanoseconds)
        observe(.delete, count: tally.delete, nanoseconds: nanoseconds)
        observe(.other, count: tally.other, nanoseconds: nanoseconds)
    }

    /// Adds this loop's figures for `command` to `histogram`.
    func add(_ command: LatencyCommand, to histogram: inout LatencyHistogram) {
        let base = command.rawValue * Self.cellsPerCommand
        if histogram.buckets.isEmpty { histogram.buckets = Array(repeating: 0, count: Self.bounds.count + 1) }
        for bucket in 0...Self.bounds.count {
            histogram.buckets[bucket] += cells[base + bucket].load(ordering: .relaxed)
        }
        histogram.sumNanoseconds += cells[base + Self.cellsPerCommand - 1].load(ordering: .relaxed)
    }
}
