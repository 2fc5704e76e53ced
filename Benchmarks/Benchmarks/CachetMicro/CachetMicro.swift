import Benchmark

// Micro-benchmarks, one function per module: run with `swift package benchmark` from Benchmarks/.
// Every benchmark states its metrics; `mallocCountTotal` shows whether a hot path allocates.
let benchmarks: @Sendable () -> Void = {
    codecBenchmarks()
    memoryTierBenchmarks()
    ringBenchmarks()
}
