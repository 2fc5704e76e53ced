/// One command's durations summed over the loops: a count per bucket (the last past every bound), and
/// their sum.
struct LatencyHistogram {
    var buckets: [Int] = []
    var sumNanoseconds = 0

    var count: Int { buckets.reduce(0, +) }
}
