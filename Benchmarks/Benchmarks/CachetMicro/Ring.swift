import Benchmark
import CachetRing

/// The consistent-hash ring: owner lookup for a key with 3, 10 and 100 members, and building or
/// changing a ring of 10 members at the default 160 points each.
func ringBenchmarks() {
    // cachet-bench's keys: `key:` and a zero-padded index, 14 bytes.
    let keys = (0..<10_000).map { Array("key:\(String(repeating: "0", count: 10 - String($0).count))\($0)".utf8) }
    let members = (0..<100).map { "10.0.0.\($0 + 1):7420" }

    for count in [3, 10, 100] {
        let ring = try! CachetRing(members: Array(members.prefix(count)))
        Benchmark(
            "Ring: owner of a 14-byte key, \(count) members (1000 per iteration)",
            configuration: .init(
                metrics: [.wallClock, .throughput, .mallocCountTotal, .instructions],
                scalingFactor: .kilo
            )
        ) { benchmark in
            for i in benchmark.scaledIterations {
                keys[i % keys.count].withUnsafeBytes { key in blackHole(ring.owner(of: key)) }
            }
        }
    }

    let ten = Array(members.prefix(10))
    Benchmark(
        "Ring: build, 10 members x 160 points",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions])
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try! CachetRing(members: ten))
        }
    }

    let ring = try! CachetRing(members: ten)
    Benchmark(
        "Ring: add an 11th member to 10 x 160 points",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions])
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try! ring.adding("10.0.0.200:7420"))
        }
    }

    Benchmark(
        "Ring: remove a member from 10 x 160 points",
        configuration: .init(metrics: [.wallClock, .mallocCountTotal, .instructions])
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try! ring.removing("10.0.0.5:7420"))
        }
    }
}
