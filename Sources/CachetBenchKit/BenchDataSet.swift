import CachetRing

/// The keys and the value of a run, and which server each key belongs to. The value is laid out once;
/// a key is written from its index when a request needs it, which is cheaper than reading it from a table
/// of every key: with 100,000 random keys such a table missed the CPU cache on most requests
/// (BENCHMARKS.md, "Figures behind choices in the code").
///
/// With several servers, a key belongs to its owner on the consistent-hash ring (`CachetRing`) whose
/// members are the servers' `host:port` names, so keys go where a Cachet client routing by
/// `Protocol/RING.md` would send them.
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

    /// Lays out the value and, with several servers, finds every key's server on the ring.
    /// - Parameter configuration: a validated configuration.
    /// - Throws: ``BenchError`` with code `invalidConfiguration` when the servers do not make a ring
    ///   (a server named twice).
    init(configuration: BenchConfiguration) throws(BenchError) {
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

        if targetCount > 1 {
            let ring: CachetRing
            do {
                ring = try CachetRing(
                    members: configuration.targets.map(\.id),
                    virtualNodesPerMember: configuration.virtualNodesPerMember
                )
            } catch {
                value.deallocate()
                throw BenchError(.invalidConfiguration, error.message)
            }
            // The ring numbers its members in name order; the connections number servers as given.
            let targetOfMember = ring.members.map { member in
                configuration.targets.firstIndex { $0.id == member }!
            }
            byTarget = .allocate(capacity: max(1, count))
            let owners = UnsafeMutablePointer<UInt32>.allocate(capacity: count)
            var sizes = [Int](repeating: 0, count: targetCount)
            let key = UnsafeMutableRawPointer.allocate(byteCount: keyLength, alignment: 8)
            defer { key.deallocate() }
            for index in 0..<count {
                _ = BenchConfiguration.writeKey(index, digits: keyDigits, to: key)
                let owner = targetOfMember[ring.owner(of: UnsafeRawBufferPointer(start: key, count: keyLength))]
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
            byTarget = .allocate(capacity: max(1, count))
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
