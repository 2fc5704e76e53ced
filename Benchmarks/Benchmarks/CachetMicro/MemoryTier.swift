import Benchmark
import CachetStore

/// The memory tier: GET hits over 100k keys, PUTs that evict (the LRU at work), and 1 MB values replaced
/// in place (the pool of large blocks at work: no `malloc` once warm).
func memoryTierBenchmarks() {
    let keys = (0..<100_000).map { Array("key:\(String(repeating: "0", count: 10 - String($0).count))\($0)".utf8) }
    let value = [UInt8](repeating: 0x62, count: 100)

    let full = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: 1 << 30))
    for key in keys { full.put(key: key, value: value, expiry: 0, now: 1) }
    let small = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: 4 << 20))

    Benchmark(
        "memory tier GET hit, 100k keys (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        let store = full
        for i in benchmark.scaledIterations {
            keys[i % keys.count].withUnsafeBytes { key in
                blackHole(store.withValue(forKey: key, now: 1) { value, _ in value.count })
            }
        }
    }

    let large = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: 256 << 20))
    let largeKeys = (0..<16).map { Array("large:\($0)".utf8) }
    Benchmark(
        "memory tier 1 MB value replaced in place (reserve, fill, commit)",
        // Without .instructions: with it the harness reads /proc around every iteration, and its own
        // allocations would count here (at 1 iteration per sample they are not scaled away).
        configuration: .init(metrics: [.wallClock, .mallocCountTotal])
    ) { benchmark in
        let store = large
        for i in benchmark.scaledIterations {
            largeKeys[i % largeKeys.count].withUnsafeBytes { key in
                guard let pending = store.reservePut(key: key, valueLength: 1_000_000, expiry: 0) else { return }
                pending.value.initializeMemory(as: UInt8.self, repeating: UInt8(truncatingIfNeeded: i))
                blackHole(store.commit(pending, now: 1))
            }
        }
    }

    Benchmark(
        "memory tier PUT with eviction (1000 per iteration)",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions], scalingFactor: .kilo)
    ) { benchmark in
        let store = small
        for i in benchmark.scaledIterations {
            keys[i % keys.count].withUnsafeBytes { key in
                value.withUnsafeBytes { value in blackHole(store.put(key: key, value: value, expiry: 0, now: 1)) }
            }
        }
    }
}
