/// What a load thread does in one phase.
enum WorkerPhase: Sendable {
    /// Write every key of `positions[target]` (positions in that server's key list) once.
    case prefill(positions: [Range<Int>])
    /// Random reads and writes until `deadline` (monotonic ns) or `budget` requests; latencies are
    /// recorded when `record` is set (not while warming up).
    case measure(deadline: UInt64?, budget: Int?, record: Bool)
}
