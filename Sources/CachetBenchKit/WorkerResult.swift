import Histogram

/// A latency histogram in nanoseconds, from 1 ns to 60 s, three significant digits.
func makeLatencyHistogram() -> Histogram<UInt64> {
    Histogram<UInt64>(
        lowestDiscernibleValue: 1,
        highestTrackableValue: 60_000_000_000,
        numberOfSignificantValueDigits: .three
    )
}

/// What one load thread measured in one phase.
struct WorkerResult: Sendable {
    /// Every request's latency.
    var histogram = makeLatencyHistogram()
    /// Reads' latencies alone.
    var getHistogram = makeLatencyHistogram()
    /// Writes' latencies alone.
    var putHistogram = makeLatencyHistogram()
    var replies = 0
    var hits = 0
    var misses = 0
    var errors = 0
    var verificationErrors = 0
    var failure: BenchError?

    mutating func add(_ other: WorkerResult) {
        histogram.add(other.histogram)
        getHistogram.add(other.getHistogram)
        putHistogram.add(other.putHistogram)
        replies += other.replies
        hits += other.hits
        misses += other.misses
        errors += other.errors
        verificationErrors += other.verificationErrors
        if failure == nil { failure = other.failure }
    }
}
