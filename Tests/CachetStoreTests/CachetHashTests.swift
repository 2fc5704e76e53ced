import CachetStore
import CachetTestSupport
import Testing

@Suite("CachetHash")
struct CachetHashTests {
    /// Every byte of a key must count: changing any one byte of keys of 0 to 40 bytes changes the hash.
    @Test func everyByteOfTheKeyCounts() {
        var random = SplitMix64(state: 7)
        for length in 0...40 {
            var key = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let original = key.withUnsafeBytes { CachetHash.hash($0, seed: 99) }
            for position in 0..<length {
                for flip: UInt8 in [0x01, 0x80, 0xff] {
                    key[position] ^= flip
                    let changed = key.withUnsafeBytes { CachetHash.hash($0, seed: 99) }
                    key[position] ^= flip
                    #expect(changed != original, "length \(length), byte \(position), xor \(flip)")
                }
            }
        }
    }

    /// The length counts too: a key and the same key with a zero byte appended differ.
    @Test func lengthCounts() {
        for length in 0...16 {
            let key = [UInt8](repeating: 0, count: length)
            let longer = key + [0]
            let a = key.withUnsafeBytes { CachetHash.hash($0, seed: 1) }
            let b = longer.withUnsafeBytes { CachetHash.hash($0, seed: 1) }
            #expect(a != b, "length \(length)")
        }
    }

    /// Low bits pick shards and slots: 100,000 keys of the form bench clients use spread evenly over 16 shards.
    @Test func lowBitsSpreadEvenly() {
        var counts = [Int](repeating: 0, count: 16)
        for index in 0..<100_000 {
            let key = Array("key:\(String(repeating: "0", count: 10 - String(index).count))\(index)".utf8)
            counts[Int(key.withUnsafeBytes { CachetHash.hash($0, seed: 12345) } & 15)] += 1
        }
        // Expected 6,250 each; a binomial standard deviation is about 77.
        for count in counts { #expect(abs(count - 6250) < 400, "\(counts)") }
    }

    /// The seed changes the hash.
    @Test func seedCounts() {
        let key = Array("key:0000000042".utf8)
        let a = key.withUnsafeBytes { CachetHash.hash($0, seed: 1) }
        let b = key.withUnsafeBytes { CachetHash.hash($0, seed: 2) }
        #expect(a != b)
    }
}
