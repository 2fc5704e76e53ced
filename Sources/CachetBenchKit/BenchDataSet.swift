/// Every key and the value, laid out once before the run so that requests are copies of bytes.
///
/// `@unchecked Sendable`: the memory is written in `init` only and read by every load thread afterwards;
/// it is freed in `deinit`, after the last thread has let go of the object.
final class BenchDataSet: @unchecked Sendable {
    /// Number of keys.
    let count: Int
    /// Bytes per key (all keys have the same length).
    let keyLength: Int
    /// The keys, back to back.
    private let keyBytes: UnsafeMutableRawPointer
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
        keyBytes = .allocate(byteCount: max(1, count * keyLength), alignment: 16)
        for index in 0..<count {
            _ = BenchConfiguration.writeKey(
                index,
                digits: configuration.keyDigits,
                to: keyBytes + index * keyLength
            )
        }
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
            for index in 0..<count {
                let owner = Int(
                    BenchDataSet.hash(UnsafeRawBufferPointer(start: keyBytes + index * keyLength, count: keyLength))
                        % UInt64(targetCount)
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
        keyBytes.deallocate()
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

    /// The bytes of key `index`.
    @inline(__always)
    func key(_ index: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: keyBytes + index * keyLength, count: keyLength)
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
