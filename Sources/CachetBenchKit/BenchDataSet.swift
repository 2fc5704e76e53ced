/// The keys and the value of a run. The value is laid out once; a key is written from its index when
/// a request needs it, which is cheaper than reading it from a table of every key: with 100,000 random
/// keys such a table missed the cache on most requests (measured with perf, 10% of the load
/// generator's time).
///
/// `@unchecked Sendable`: the memory is written in `init` only and read by every load thread afterwards;
/// it is freed in `deinit`, after the last thread has let go of the object.
final class BenchDataSet: @unchecked Sendable {
    /// Number of keys.
    let count: Int
    /// Bytes per key (all keys have the same length).
    let keyLength: Int
    /// Digits of the zero-padded index in every key.
    let keyDigits: Int
    /// The value every write sends: `valueSize` bytes of `abc...z` repeated.
    let value: UnsafeRawBufferPointer
    /// Number of servers the keys are spread over.
    let targetCount: Int
    /// For each key, the server it belongs to (empty with one server).
    private let targetOfKey: UnsafeMutablePointer<UInt32>?
    /// Key indices grouped by server: those of server `t` are `byTarget[targetStart[t]..<targetStart[t + 1]]`.
    private let byTarget: UnsafeMutablePointer<Int32>
    private let targetStart: [Int]

    init(configuration: BenchConfiguration) {
        count = configuration.keys
        keyLength = configuration.keyLength
        targetCount = configuration.targets.count
        keyDigits = configuration.keyDigits
        let valueBytes = UnsafeMutableRawBufferPointer.allocate(
            byteCount: configuration.valueSize,
            alignment: 16
        )
        for index in 0..<configuration.valueSize {
            valueBytes[index] = UInt8(ascii: "a") + UInt8(index % 26)
        }
        value = UnsafeRawBufferPointer(valueBytes)

        byTarget = .allocate(capacity: max(1, count))
        if targetCount > 1 {
            let owners = UnsafeMutablePointer<UInt32>.allocate(capacity: count)
            var sizes = [Int](repeating: 0, count: targetCount)
            let key = UnsafeMutableRawPointer.allocate(byteCount: keyLength, alignment: 8)
            defer { key.deallocate() }
            for index in 0..<count {
                _ = BenchConfiguration.writeKey(index, digits: keyDigits, to: key)
                let owner = Int(
                    BenchDataSet.hash(UnsafeRawBufferPointer(start: key, count: keyLength)) % UInt64(targetCount)
                )
                owners[index] = UInt32(owner)
                sizes[owner] += 1
            }
            var starts = [0]
            for size in sizes { starts.append(starts.last! + size) }
            var next = starts
            for index in 0..<count {
                let owner = Int(owners[index])
                byTarget[next[owner]] = Int32(index)
                next[owner] += 1
            }
            targetOfKey = owners
            targetStart = starts
        } else {
            for index in 0..<count { byTarget[index] = Int32(index) }
            targetOfKey = nil
            targetStart = [0, count]
        }
    }

    deinit {
        value.deallocate()
        targetOfKey?.deallocate()
        byTarget.deallocate()
    }

    /// FNV-1a, 64 bits: which server a key belongs to is `hash(key) % servers`.
    /// - Parameter key: the key's bytes.
    /// - Returns: the hash.
    static func hash(_ key: UnsafeRawBufferPointer) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in key { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        return hash
    }

    /// Writes key `index` to `destination` (``keyLength`` bytes) and returns it.
    @inline(__always)
    func key(_ index: Int, in destination: UnsafeMutableRawPointer) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(
            start: destination,
            count: BenchConfiguration.writeKey(index, digits: keyDigits, to: destination)
        )
    }

    /// The server key `index` belongs to.
    @inline(__always)
    func target(ofKey index: Int) -> Int {
        guard let targetOfKey else { return 0 }
        return Int(targetOfKey[index])
    }

    /// How many keys server `target` owns.
    func keyCount(ofTarget target: Int) -> Int { targetStart[target + 1] - targetStart[target] }

    /// The `position`th key of server `target`.
    @inline(__always)
    func key(ofTarget target: Int, at position: Int) -> Int { Int(byTarget[targetStart[target] + position]) }
}
