extension CachetRing {
    /// XXH64, the 64-bit xxHash, of `bytes`: the hash that places keys and virtual nodes on the ring.
    ///
    /// Bit for bit the reference algorithm (Yann Collet's xxHash, `XXH64`), so that a client in any
    /// language with an xxHash library routes exactly as Cachet does; see `Protocol/RING.md`. The ring
    /// always uses seed 0. Reads the input in place, eight bytes at a time, and allocates nothing.
    /// - Parameters:
    ///   - bytes: the input.
    ///   - seed: the seed; 0 for everything the ring hashes.
    /// - Returns: `XXH64(bytes, seed)`.
    /// - Complexity: O(n) in the input's length.
    public static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
        XXH64.hash(bytes, seed: seed)
    }
}

/// The XXH64 algorithm: 32-byte stripes through four accumulators, then the tail in 8-, 4- and 1-byte
/// steps, then an avalanche. Input words are little-endian, whatever the host.
enum XXH64 {
    static let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
    static let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    static let prime3: UInt64 = 0x1656_67B1_9E37_79F9
    static let prime4: UInt64 = 0x85EB_CA77_C2B2_AE63
    static let prime5: UInt64 = 0x27D4_EB2F_1656_67C5

    @inline(__always)
    static func rotateLeft(_ value: UInt64, _ count: UInt64) -> UInt64 {
        (value << count) | (value >> (64 &- count))
    }

    @inline(__always)
    static func round(_ accumulator: UInt64, _ input: UInt64) -> UInt64 {
        rotateLeft(accumulator &+ input &* prime2, 31) &* prime1
    }

    @inline(__always)
    static func mergeRound(_ accumulator: UInt64, _ value: UInt64) -> UInt64 {
        (accumulator ^ round(0, value)) &* prime1 &+ prime4
    }

    @inline(__always)
    static func load64(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
        UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    @inline(__always)
    static func load32(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
        UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
    }

    static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64) -> UInt64 {
        let count = bytes.count
        var offset = 0
        var state: UInt64
        if count >= 32 {
            var v1 = seed &+ prime1 &+ prime2
            var v2 = seed &+ prime2
            var v3 = seed
            var v4 = seed &- prime1
            let limit = count - 32
            while offset <= limit {
                v1 = round(v1, load64(bytes, offset))
                v2 = round(v2, load64(bytes, offset + 8))
                v3 = round(v3, load64(bytes, offset + 16))
                v4 = round(v4, load64(bytes, offset + 24))
                offset += 32
            }
            state = rotateLeft(v1, 1) &+ rotateLeft(v2, 7) &+ rotateLeft(v3, 12) &+ rotateLeft(v4, 18)
            state = mergeRound(state, v1)
            state = mergeRound(state, v2)
            state = mergeRound(state, v3)
            state = mergeRound(state, v4)
        } else {
            state = seed &+ prime5
        }
        state &+= UInt64(truncatingIfNeeded: count)

        while offset + 8 <= count {
            state ^= round(0, load64(bytes, offset))
            state = rotateLeft(state, 27) &* prime1 &+ prime4
            offset += 8
        }
        if offset + 4 <= count {
            state ^= load32(bytes, offset) &* prime1
            state = rotateLeft(state, 23) &* prime2 &+ prime3
            offset += 4
        }
        while offset < count {
            state ^= UInt64(bytes[offset]) &* prime5
            state = rotateLeft(state, 11) &* prime1
            offset += 1
        }

        state ^= state >> 33
        state &*= prime2
        state ^= state >> 29
        state &*= prime3
        state ^= state >> 32
        return state
    }
}
