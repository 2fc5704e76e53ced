/// A fast 64-bit non-cryptographic hash over bytes, for the memory tier's shards and tables.
///
/// Eight bytes at a time with a multiply-xorshift mix and a murmur3 finaliser; much faster than the
/// standard library's SipHash on short keys. Not resistant to chosen-key flooding: the seed is random
/// per store, which makes crafting collisions from outside impractical without seeing the hashes.
public enum CachetHash {
    /// Hashes `bytes` with `seed`.
    /// - Parameters:
    ///   - bytes: the key.
    ///   - seed: a per-store random seed.
    /// - Returns: 64 well-mixed bits.
    /// - Complexity: O(n) in the key's length.
    @inlinable
    public static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64) -> UInt64 {
        let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15
        var state = seed ^ (UInt64(bytes.count) &* multiplier)
        var offset = 0
        let count = bytes.count
        while offset + 8 <= count {
            let word = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            state = (state ^ word) &* multiplier
            state ^= state >> 29
            offset += 8
        }
        if offset < count {
            // The last 1 to 7 bytes in at most two loads, overlapping where they must (as wyhash does):
            // with the length already mixed in, first-and-last covers every byte.
            let rest = count - offset
            let tail = bytes.baseAddress! + offset
            let word: UInt64
            if rest >= 4 {
                let first = UInt64(tail.loadUnaligned(as: UInt32.self))
                let last = UInt64((tail + rest - 4).loadUnaligned(as: UInt32.self))
                word = first | last << 32
            } else {
                let first = UInt64(tail.load(as: UInt8.self))
                let middle = UInt64(tail.load(fromByteOffset: rest >> 1, as: UInt8.self))
                let last = UInt64(tail.load(fromByteOffset: rest - 1, as: UInt8.self))
                word = first | middle << 8 | last << 16
            }
            state = (state ^ word) &* multiplier
            state ^= state >> 29
        }
        // murmur3 fmix64
        state ^= state >> 33
        state = state &* 0xff51_afd7_ed55_8ccd
        state ^= state >> 33
        state = state &* 0xc4ce_b9fe_1a85_ec53
        state ^= state >> 33
        return state
    }
}
