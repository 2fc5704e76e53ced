import Benchmark

// Micro-benchmarks, one function per module: run with `swift package benchmark` from Benchmarks/.
// Every benchmark states its metrics; `mallocCountTotal` shows whether a hot path allocates.
let benchmarks: @Sendable () -> Void = {
    codecBenchmarks()
    memoryTierBenchmarks()
    // The ring (CachetRing) gets `ringBenchmarks()` in Ring.swift beside this file once it exists:
    // node lookup for a key, and rebuilding the ring when a node joins or leaves.
}
