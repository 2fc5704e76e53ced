#if canImport(Glibc)
import CachetLocking
import Glibc
#endif

/// Keeps the memory of freed large entries for the next large entries of the same size class, as
/// memcached's slab classes do, so that a PUT of a large value writes into pages that are already mapped.
///
/// Without it, glibc serves some large blocks from fresh memory (an `mmap`, or a heap that grows because
/// the block was freed into another thread's arena): every 4 KiB page of the value then costs a page fault
/// while the socket read fills it. With large values that was a good share of the PUTs, and those PUTs
/// are where the 99th percentile of a mixed workload sits (BENCHMARKS.md, "Figures behind choices in the
/// code").
///
/// Blocks of ``minimumBlockSize`` bytes and more are allocated at a size class: eight classes per power
/// of two, so a block is at most 12.5% larger than asked for (``blockSize(for:)``). A freed block is kept
/// within the pool's `limit`, and handed out again for the same class; to make room for it, blocks of other
/// classes go back to the allocator first, so that sizes no longer asked for do not hold the pool. Smaller
/// blocks go straight to `malloc` and `free`.
///
/// Each class's free blocks form a list linked through their own first eight bytes (the memory is free,
/// so it can hold the link), so taking and returning a block allocates nothing.
///
/// Thread-safe: one lock around the free lists, taken only for large blocks. `@unchecked Sendable`: the
/// list heads are read and written only inside `pooled`'s lock (a `CachetLock`).
final class LargeBlockPool: @unchecked Sendable {
    /// Blocks this large or larger are allocated at a size class and pooled when freed.
    static let minimumBlockSize = 64 * 1024
    /// Size classes per power of two.
    private static let classesPerDoubling = 8
    /// Classes up to blocks of 2^35 bytes, past the largest entry (a 4 GiB value with its header); a block
    /// beyond them would simply not be pooled.
    private static let classCount = 35 * classesPerDoubling

    /// Free bytes held, and the lock that guards `heads`.
    private let pooled = CachetLock(0)
    /// The first free block of each class, by class index (see `classIndex(ofBlockSize:)`); nil when none.
    private let heads: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    /// Bytes of free blocks the pool keeps at most.
    let limit: Int

    /// Creates an empty pool.
    /// - Parameter limit: bytes of free blocks to keep at most; 0 keeps none.
    init(limit: Int) {
        self.limit = max(0, limit)
        heads = .allocate(capacity: Self.classCount)
        heads.initialize(repeating: nil, count: Self.classCount)
    }

    /// The pool's limit for a memory tier of `memoryLimit` bytes: a sixteenth of it, at most 64 MiB.
    static func defaultLimit(memoryLimit: Int) -> Int {
        min(memoryLimit / 16, 64 << 20)
    }

    deinit {
        pooled.withLock { _ in
            for index in 0..<Self.classCount {
                while let block = pop(index) { Glibc.free(block) }
            }
        }
        heads.deallocate()
    }

    /// Unlinks the first free block of class `index`. Called with the lock held.
    private func pop(_ index: Int) -> UnsafeMutableRawPointer? {
        guard let block = heads[index] else { return nil }
        heads[index] = block.load(as: UnsafeMutableRawPointer?.self)
        return block
    }

    /// Links `block` in front of class `index`'s free blocks. Called with the lock held.
    private func push(_ block: UnsafeMutableRawPointer, _ index: Int) {
        block.storeBytes(of: heads[index], as: UnsafeMutableRawPointer?.self)
        heads[index] = block
    }

    /// The bytes a block for a request of `byteCount` bytes takes: `byteCount` below
    /// ``minimumBlockSize``, otherwise `byteCount` rounded up to its size class.
    /// - Complexity: O(1).
    @inline(__always)
    static func blockSize(for byteCount: Int) -> Int {
        byteCount < minimumBlockSize ? byteCount : classSize(for: byteCount)
    }

    /// `byteCount` (at least ``minimumBlockSize``) rounded up to its size class. Kept out of line so that
    /// the small-entry path, which is every PUT of a small value, inlines to one comparison.
    @inline(never)
    private static func classSize(for byteCount: Int) -> Int {
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

    /// The class index of a large block size, or nil past the last class.
    @inline(__always)
    private static func pooledClass(ofBlockSize size: Int) -> Int? {
        let index = classIndex(ofBlockSize: size)
        return index < classCount ? index : nil
    }

    /// The block size of class `index`: the inverse of `classIndex(ofBlockSize:)`.
    private static func blockSize(ofClass index: Int) -> Int {
        let octave = index / classesPerDoubling
        return (1 << octave) + ((index % classesPerDoubling) << (octave - 3))
    }

    /// Free bytes held for reuse.
    var pooledBytes: Int { pooled.withLock { $0 } }

    /// A block of `size` bytes, as ``blockSize(for:)`` returned it: a pooled one of the same class when
    /// there is one, otherwise a new one.
    /// - Complexity: O(1).
    @inline(__always)
    func allocate(size: Int) -> UnsafeMutableRawPointer {
        size < Self.minimumBlockSize ? malloc(size)! : allocateLarge(size: size)
    }

    @inline(never)
    private func allocateLarge(size: Int) -> UnsafeMutableRawPointer {
        if let index = Self.pooledClass(ofBlockSize: size) {
            let reused = pooled.withLock { pooledBytes -> UnsafeMutableRawPointer? in
                guard let block = pop(index) else { return nil }
                pooledBytes -= size
                return block
            }
            if let reused { return reused }
        }
        return malloc(size)!
    }

    /// Takes back a block from ``allocate(size:)``: keeps it for reuse if it is large and fits the limit,
    /// after pushing out blocks of other classes if that makes room; otherwise frees it.
    /// - Complexity: O(1), plus a scan of the classes when the pool is full.
    @inline(__always)
    func release(_ block: UnsafeMutableRawPointer, size: Int) {
        if size < Self.minimumBlockSize {
            Glibc.free(block)
        } else {
            releaseLarge(block, size: size)
        }
    }

    @inline(never)
    private func releaseLarge(_ block: UnsafeMutableRawPointer, size: Int) {
        guard size <= limit, let index = Self.pooledClass(ofBlockSize: size) else {
            Glibc.free(block)
            return
        }
        // The newest block wins: blocks of classes no longer asked for must not hold the room. What is
        // pushed out is linked into a list of its own and freed after the lock.
        var dropped: UnsafeMutableRawPointer? = nil
        pooled.withLock { pooledBytes in
            var victim = 0
            while pooledBytes + size > limit && victim < Self.classCount {
                if victim != index, let old = pop(victim) {
                    old.storeBytes(of: dropped, as: UnsafeMutableRawPointer?.self)
                    dropped = old
                    pooledBytes -= Self.blockSize(ofClass: victim)
                } else {
                    victim += 1
                }
            }
            if pooledBytes + size <= limit {
                push(block, index)
                pooledBytes += size
            } else {
                // Only blocks of this class are pooled and they fill the limit.
                block.storeBytes(of: dropped, as: UnsafeMutableRawPointer?.self)
                dropped = block
            }
        }
        while let old = dropped {
            dropped = old.load(as: UnsafeMutableRawPointer?.self)
            Glibc.free(old)
        }
    }
}
