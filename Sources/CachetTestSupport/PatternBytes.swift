#if canImport(Glibc)
import Glibc
#endif

/// Large test values built and compared at memory speed.
///
/// Tests run unoptimized (and ThreadSanitizer instruments every store), so building an 8 MiB value with
/// `(0..<n).map { ... }` costs a closure call per byte: seconds per value, on the task pool's threads,
/// where it holds up every other test. These build the same kind of value with a few `memcpy`s.
public enum PatternBytes {
    /// `count` bytes, byte `i` being `i × step + seed` (truncated to 8 bits): the pattern repeats every
    /// 256 bytes (`step` odd), so a value that comes back shifted, cut short or mixed with another's bytes
    /// does not compare equal.
    /// - Parameters:
    ///   - count: the length.
    ///   - step: what each byte adds to the previous one; odd for a 256-byte period.
    ///   - seed: the first byte (tells apart the values of several tasks).
    ///   - blockSize: when given, the first four bytes of every block of this many bytes hold the block's
    ///     number (little-endian), so that blocks that come back swapped or repeated do not compare equal
    ///     either.
    public static func make(count: Int, step: Int = 7, seed: Int = 0, stampingEvery blockSize: Int? = nil) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            guard let base = buffer.baseAddress else {
                initialized = 0
                return
            }
            let period = min(count, 256)
            for index in 0..<period { base[index] = UInt8(truncatingIfNeeded: index &* step &+ seed) }
            // The period divides every filled length (a multiple of 256), so copying the filled prefix after
            // itself continues the pattern.
            var filled = period
            while filled < count {
                let chunk = min(filled, count - filled)
                memcpy(base + filled, base, chunk)
                filled += chunk
            }
            if let blockSize, blockSize >= 4 {
                for (number, start) in stride(from: 0, to: count - 3, by: blockSize).enumerated() {
                    withUnsafeBytes(of: UInt32(truncatingIfNeeded: number).littleEndian) { stamp in
                        for offset in 0..<4 { base[start + offset] = stamp[offset] }
                    }
                }
            }
            initialized = count
        }
    }

    /// Whether `a` and `b` hold the same bytes (`memcmp`; `==` on arrays compares element by element).
    public static func equal(_ a: [UInt8]?, _ b: [UInt8]?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        guard a.count == b.count else { return false }
        guard !a.isEmpty else { return true }
        return a.withUnsafeBytes { a in
            b.withUnsafeBytes { b in memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0 }
        }
    }
}
