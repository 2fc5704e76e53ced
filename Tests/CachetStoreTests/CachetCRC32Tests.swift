import CChecksum
import Testing

@testable import CachetStore

/// The disk tier's CRC-32 by carry-less multiplication gives zlib's CRC-32 for every length, alignment and
/// starting value: files written before it are read by it, and the other way round.
@Suite struct CachetCRC32Tests {
    @Test func knownValue() {
        let check = Array("123456789".utf8).withUnsafeBytes { CachetCRC32.update(0, $0) }
        #expect(check == 0xCBF4_3926)
        #expect(([] as [UInt8]).withUnsafeBytes { CachetCRC32.update(0x1234, $0) } == 0x1234)
    }

    @Test func agreesWithZlibAtEveryLengthAndAlignment() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<5000).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes.withUnsafeBytes { all in
            for length in Array(0...600) + [1023, 1024, 1025, 4096 - 1, 4096, 4096 + 17, 4900] {
                for start in [0, 1, 7, 15, 16, 63] where start + length <= all.count {
                    let slice = UnsafeRawBufferPointer(rebasing: all[start..<(start + length)])
                    for seed: UInt32 in [0, 0xFFFF_FFFF, 0x8BAD_F00D] {
                        #expect(
                            CachetCRC32.update(seed, slice) == CachetCRC32.zlibOnly(seed, slice),
                            "length \(length), start \(start), seed \(seed)"
                        )
                        // The 16-byte path that processors without AVX-512 take, on its own.
                        if length >= 64, length % 16 == 0, cachet_crc32_folding_available() != 0 {
                            let narrow = cachet_crc32_folded_narrow(
                                seed,
                                slice.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                length
                            )
                            #expect(narrow == CachetCRC32.zlibOnly(seed, slice), "narrow: length \(length)")
                        }
                    }
                }
            }
        }
    }

    @Test func aLargeBufferInOneCallOrInPieces() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<(1 << 20) + 13).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes.withUnsafeBytes { all in
            let whole = CachetCRC32.update(0, all)
            #expect(whole == CachetCRC32.zlibOnly(0, all))
            var pieces: UInt32 = 0
            var offset = 0
            for size in [100, 64, 262_144, 3, 500_000] {
                pieces = CachetCRC32.update(pieces, UnsafeRawBufferPointer(rebasing: all[offset..<(offset + size)]))
                offset += size
            }
            pieces = CachetCRC32.update(pieces, UnsafeRawBufferPointer(rebasing: all[offset...]))
            #expect(pieces == whole)
        }
    }
}
