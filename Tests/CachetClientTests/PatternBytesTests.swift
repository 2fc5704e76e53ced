import CachetTestSupport
import Testing

@Suite("Test values built with memcpy")
struct PatternBytesTests {
    @Test(
        "the same bytes as the byte-by-byte definition, at every length around the period",
        arguments: [0, 1, 255, 256, 257, 511, 70_001]
    )
    func matchesTheDefinition(count: Int) {
        let expected = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 5) }
        #expect(PatternBytes.make(count: count, step: 31, seed: 5) == expected)
    }

    @Test("equal tells a shifted, a shortened and another task's value apart")
    func equality() {
        let value = PatternBytes.make(count: 100_000, seed: 1)
        #expect(PatternBytes.equal(value, PatternBytes.make(count: 100_000, seed: 1)))
        #expect(!PatternBytes.equal(value, PatternBytes.make(count: 100_000, seed: 2)))
        #expect(!PatternBytes.equal(value, Array(value.dropLast())))
        #expect(!PatternBytes.equal(value, Array(value.dropFirst()) + [0]))
        #expect(!PatternBytes.equal(value, nil))
        #expect(PatternBytes.equal(nil, nil))
        #expect(PatternBytes.equal([], []))
        #expect(!PatternBytes.equal([], nil))
    }

    @Test("stamped blocks carry their numbers, so swapped blocks differ")
    func stamps() {
        let value = PatternBytes.make(count: 4 * 65_536 + 100, step: 131, stampingEvery: 65_536)
        for block in 0..<5 {
            #expect(Array(value[(block * 65_536)..<(block * 65_536 + 4)]) == [UInt8(block), 0, 0, 0])
        }
        #expect(value[4] == UInt8(truncatingIfNeeded: 4 * 131))
        var swapped = value
        swapped.replaceSubrange(0..<65_536, with: value[65_536..<131_072])
        swapped.replaceSubrange(65_536..<131_072, with: value[0..<65_536])
        #expect(!PatternBytes.equal(value, swapped))
    }
}
