import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Keeps the memory of freed large entries for the next large entries of the same size class, as
/// memcached's slab classes do, so that a PUT of a large value writes into pages that are already mapped.
///
/// Without it, glibc serves some large blocks from fresh memory (an `mmap`, or a heap that grows because
/// the block was freed into another thread's arena): every 4 KiB page of the value then costs a page fault
/// while the socket read fills it. With 1 MB values and 10% PUTs that was about 1 PUT in 10, each paying
/// some 245 faults, which is where the 99th percentile of a mixed workload sits (BENCHMARKS.md).
///
/// Blocks of ``minimumBlockSize`` bytes and more are allocated at a size class: eight classes per power
/// of two, so a block is at most 12.5% larger than asked for (``blockSize(for:)``). A freed block is kept
/// within the pool's `limit`, and handed out again for the same class; to make room for it, blocks of other
/// classes go back to the allocator first, so that sizes no longer asked for do not hold the pool. Smaller
/// blocks go straight to `malloc` and `free`.
///
/// Thread-safe: one lock around the free lists, taken only for large blocks. `@unchecked Sendable`: the
/// free lists are reached only through `state`'s lock.
final class LargeBlockPool: @unchecked Sendable {
    /// Blocks this large or larger are allocated at a size class and pooled when freed.
    static let minimumBlockSize = 64 * 1024
    /// Size classes per power of two.
    private static let classesPerDoubling = 8

    private struct State {
        /// Free blocks by class index (see `classIndex(ofBlockSize:)`), as addresses.
        var free: [Int: [UInt]] = [:]
        var pooledBytes = 0

        /// Removes a pooled block of another class than `index`, if there is one.
        mutating func takeBlock(otherThan index: Int) -> (address: UInt, size: Int)? {
            guard let victim = free.first(where: { $0.key != index && !$0.value.isEmpty })?.key,
                let address = free[victim]?.popLast()
            else { return nil }
            if free[victim]?.isEmpty == true { free[victim] = nil }
            return (address, LargeBlockPool.blockSize(ofClass: victim))
        }
    }

    private let state = Mutex(State())
    /// Bytes of free blocks the pool keeps at most.
    let limit: Int

    /// Creates an empty pool.
    /// - Parameter limit: bytes of free blocks to keep at most; 0 keeps none.
    init(limit: Int) {
        self.limit = max(0, limit)
    }

    /// The pool's limit for a memory tier of `memoryLimit` bytes: a sixteenth of it, at most 64 MiB.
    static func defaultLimit(memoryLimit: Int) -> Int {
        min(memoryLimit / 16, 64 << 20)
    }

    deinit {
        state.withLock { state in
            for blocks in state.free.values {
                for address in blocks { Glibc.free(UnsafeMutableRawPointer(bitPattern: address)) }
            }
        }
    }

    /// The bytes a block for a request of `byteCount` bytes takes: `byteCount` below
    /// ``minimumBlockSize``, otherwise `byteCount` rounded up to its size class.
    /// - Complexity: O(1).
    @inline(__always)
    static func blockSize(for byteCount: Int) -> Int {
        guard byteCount >= minimumBlockSize else { return byteCount }
        // Classes split [2^k, 2^(k+1)) into eight equal steps of 2^(k-3) bytes.
        let octave = Int.bitWidth - 1 - byteCount.leadingZeroBitCount
        let step = 1 << (octave - 3)
        return (byteCount + step - 1) & ~(step - 1)
    }

    /// A class index for a block size that ``blockSize(for:)`` returned.
    private static func classIndex(ofBlockSize size: Int) -> Int {
        let octave = Int.bitWidth - 1 - size.leadingZeroBitCount
        let step = 1 << (octave - 3)
        // A size of exactly 2^(k+1) after rounding belongs to octave k+1, step 0.
        return octave * classesPerDoubling + (size - (1 << octave)) / step
    }

    /// The block size of class `index`: the inverse of `classIndex(ofBlockSize:)`.
    private static func blockSize(ofClass index: Int) -> Int {
        let octave = index / classesPerDoubling
        return (1 << octave) + ((index % classesPerDoubling) << (octave - 3))
    }

    /// Free bytes held for reuse.
    var pooledBytes: Int { state.withLock { $0.pooledBytes } }

    /// A block of `size` bytes, as ``blockSize(for:)`` returned it: a pooled one of the same class when
    /// there is one, otherwise a new one.
    /// - Complexity: O(1) on average.
    func allocate(size: Int) -> UnsafeMutableRawPointer {
        if size >= Self.minimumBlockSize {
            let index = Self.classIndex(ofBlockSize: size)
            let reused: UInt? = state.withLock { state in
                guard let address = state.free[index]?.popLast() else { return nil }
                state.pooledBytes -= size
                return address
            }
            if let reused { return UnsafeMutableRawPointer(bitPattern: reused)! }
        }
        return malloc(size)!
    }

    /// Takes back a block from ``allocate(size:)``: keeps it for reuse if it is large and the pool has room,
    /// otherwise frees it.
    /// - Complexity: O(1) on average.
    func release(_ block: UnsafeMutableRawPointer, size: Int) {
        if size >= Self.minimumBlockSize {
            let index = Self.classIndex(ofBlockSize: size)
            let (kept, dropped) = state.withLock { state -> (Bool, [UInt]) in
                guard size <= limit else { return (false, []) }
                // The newest block wins: blocks of classes no longer asked for must not hold the room.
                var dropped: [UInt] = []
                while state.pooledBytes + size > limit, let victim = state.takeBlock(otherThan: index) {
                    dropped.append(victim.address)
                    state.pooledBytes -= victim.size
                }
                guard state.pooledBytes + size <= limit else { return (false, dropped) }
                state.free[index, default: []].append(UInt(bitPattern: block))
                state.pooledBytes += size
                return (true, dropped)
            }
            for address in dropped { Glibc.free(UnsafeMutableRawPointer(bitPattern: address)) }
            if kept { return }
        }
        Glibc.free(block)
    }
}
