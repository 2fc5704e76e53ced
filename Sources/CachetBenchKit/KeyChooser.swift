/// A small, fast generator (xorshift64*), one per load thread: no locks, no allocation.
public struct BenchRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// Creates a generator; a zero seed is replaced.
    /// - Parameter seed: the seed.
    public init(seed: UInt64) { state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 0x2545_F491_4F6C_DD1D
    }

    /// A uniform double in [0, 1).
    public mutating func nextUnit() -> Double { Double(next() >> 11) * 0x1.0p-53 }
}

/// How keys are drawn.
public enum BenchDistribution: String, Sendable, CaseIterable {
    /// Every key equally likely.
    case uniform
    /// Zipf with exponent 0.99: a few keys are hot, as in real caches.
    case zipf
}

/// Draws key indices in `0..<count`.
public struct KeyChooser: Sendable {
    /// How many keys there are.
    public let count: Int
    private let cumulative: [Double]

    /// Creates a chooser.
    /// - Parameters:
    ///   - count: the number of keys.
    ///   - distribution: uniform or zipf.
    ///   - exponent: the zipf exponent.
    public init(count: Int, distribution: BenchDistribution, exponent: Double = 0.99) {
        self.count = count
        guard distribution == .zipf else {
            cumulative = []
            return
        }
        var weights = [Double](repeating: 0, count: count)
        var total = 0.0
        for rank in 0..<count {
            total += 1 / pow(Double(rank + 1), exponent)
            weights[rank] = total
        }
        cumulative = weights.map { $0 / total }
    }

    /// The next key index.
    /// - Parameter random: the thread's generator.
    /// - Returns: an index in `0..<count`; rank 0 is the hottest key under zipf.
    @inline(__always)
    public func next(_ random: inout BenchRandom) -> Int {
        if cumulative.isEmpty { return Int(random.next() % UInt64(count)) }
        let target = random.nextUnit()
        var low = 0
        var high = count - 1
        while low < high {
            let middle = (low + high) / 2
            if cumulative[middle] < target { low = middle + 1 } else { high = middle }
        }
        return low
    }
}

#if canImport(Glibc)
import Glibc
#endif
