/// The watched prefixes, for matching a key: the prefix lengths in use, the prefixes by the hash of their
/// bytes (so a key is hashed once per length, whatever the number of watchers), and the set of their first
/// bytes (so most keys no prefix can match are turned away by one bit test). Immutable.
final class WatchPrefixIndex: Sendable {
    let lengths: [Int]
    /// For each length in `lengths`, the set of the last bytes of the prefixes that long: checked before
    /// the key's first bytes are hashed.
    let lastBytes: [(UInt64, UInt64, UInt64, UInt64)]
    let byHash: [UInt64: [[UInt8]]]
    /// Bit b of word b / 64: some prefix starts with byte b.
    let firstBytes: (UInt64, UInt64, UInt64, UInt64)
    /// The empty prefix is watched: every key matches.
    let matchesEverything: Bool
    let isEmpty: Bool
    /// Rises with each rebuild, so that a loop never replaces an index with an older one.
    let version: UInt64

    init(prefixes: some Collection<[UInt8]>, version: UInt64) {
        self.version = version
        lengths = Array(Set(prefixes.map(\.count))).sorted()
        var last = [[UInt64]](repeating: [0, 0, 0, 0], count: lengths.count)
        for prefix in prefixes {
            guard let byte = prefix.last, let slot = lengths.firstIndex(of: prefix.count) else { continue }
            last[slot][Int(byte >> 6)] |= 1 << UInt64(byte & 63)
        }
        lastBytes = last.map { ($0[0], $0[1], $0[2], $0[3]) }
        var byHash: [UInt64: [[UInt8]]] = [:]
        var words: [UInt64] = [0, 0, 0, 0]
        for prefix in prefixes {
            byHash[prefix.withUnsafeBytes { NodeWatchHub.hash($0) }, default: []].append(prefix)
            if let first = prefix.first { words[Int(first >> 6)] |= 1 << UInt64(first & 63) }
        }
        self.byHash = byHash
        firstBytes = (words[0], words[1], words[2], words[3])
        matchesEverything = prefixes.contains { $0.isEmpty }
        isEmpty = prefixes.isEmpty
    }

    /// Whether some prefix may match `key` (exactly: a prefix's bytes are compared).
    @inline(__always)
    func mayMatch(_ key: UnsafeRawBufferPointer) -> Bool {
        if matchesEverything { return true }
        guard let first = key.first, Self.contains(firstBytes, first) else { return false }
        var found: [[UInt8]] = []
        matches(key, into: &found)
        return !found.isEmpty
    }

    @inline(__always)
    static func contains(_ set: (UInt64, UInt64, UInt64, UInt64), _ byte: UInt8) -> Bool {
        let word: UInt64
        switch byte >> 6 {
        case 0: word = set.0
        case 1: word = set.1
        case 2: word = set.2
        default: word = set.3
        }
        return word & (1 << UInt64(byte & 63)) != 0
    }

    /// The prefixes `key` starts with.
    func matches(_ key: UnsafeRawBufferPointer, into found: inout [[UInt8]]) {
        for (slot, length) in lengths.enumerated() where length <= key.count {
            if length > 0 && !Self.contains(lastBytes[slot], key[length - 1]) { continue }
            let start = UnsafeRawBufferPointer(rebasing: key[0..<length])
            guard let candidates = byHash[NodeWatchHub.hash(start)] else { continue }
            for prefix in candidates where prefix.count == length && prefix.elementsEqual(start) {
                found.append(prefix)
            }
        }
    }
}
