#if canImport(Glibc)
import Glibc
#endif

/// A growable byte buffer with a read index and a write index, owned by one connection.
///
/// Not thread-safe: a connection touches its buffers only on its event loop's queue. Memory is a single
/// `malloc` block, compacted by moving the unread bytes to the front, so steady-state traffic allocates
/// nothing. It grows by doubling while small and by at most ``largestGrowthStep`` at a time once large
/// (but always by at least what is asked), so its size follows the bytes it must hold rather than racing
/// ahead of them; ``resize(to:)`` gives memory back.
struct ByteBuffer: ~Copyable {
    private(set) var base: UnsafeMutableRawPointer
    private(set) var capacity: Int
    /// Offset of the first unread byte.
    private(set) var readIndex = 0
    /// Offset just past the last written byte.
    private(set) var writeIndex = 0

    init(capacity: Int) {
        self.capacity = max(capacity, 64)
        base = malloc(self.capacity)!
    }

    deinit { free(base) }

    /// Bytes written and not yet read.
    var readableBytes: Int { writeIndex - readIndex }

    /// Room after the write index.
    var writableBytes: Int { capacity - writeIndex }

    /// The unread bytes.
    var readableRegion: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + readIndex, count: writeIndex - readIndex)
    }

    /// All bytes from the buffer's start to the write index: offsets in it are buffer offsets.
    var wholeRegion: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: writeIndex) }

    /// Where the next written byte goes.
    var writePointer: UnsafeMutableRawPointer { base + writeIndex }

    mutating func moveReadIndex(to offset: Int) {
        precondition(offset >= readIndex && offset <= writeIndex)
        readIndex = offset
        if readIndex == writeIndex {
            readIndex = 0
            writeIndex = 0
        }
    }

    mutating func moveReadIndex(forwardBy count: Int) { moveReadIndex(to: readIndex + count) }

    mutating func moveWriteIndex(forwardBy count: Int) {
        precondition(count >= 0 && writeIndex + count <= capacity)
        writeIndex += count
    }

    /// Makes room for at least `count` more bytes after the write index: compacts first, grows if needed.
    mutating func reserveWritable(_ count: Int) {
        if writableBytes >= count { return }
        if readIndex > 0 {
            let unread = readableBytes
            if unread > 0 { memmove(base, base + readIndex, unread) }
            readIndex = 0
            writeIndex = unread
            if writableBytes >= count { return }
        }
        resize(to: max(writeIndex + count, capacity + min(capacity, Self.largestGrowthStep)))
    }

    /// The most a buffer grows by beyond what it was asked for, once it is large.
    static let largestGrowthStep = 1 << 20

    /// Moves the unread bytes to the front, so that all free room follows them.
    mutating func compact() {
        guard readIndex > 0 else { return }
        let unread = readableBytes
        if unread > 0 { memmove(base, base + readIndex, unread) }
        readIndex = 0
        writeIndex = unread
    }

    /// Reallocates to exactly `newCapacity` bytes (at least the unread bytes, and 64), compacting first.
    mutating func resize(to newCapacity: Int) {
        compact()
        let size = max(newCapacity, writeIndex, 64)
        guard size != capacity else { return }
        base = realloc(base, size)!
        capacity = size
    }

    /// Gives memory back when the buffer is empty and has grown past `threshold` (after a very large
    /// frame has passed), shrinking it to `size`.
    mutating func shrinkIfEmpty(above threshold: Int, to size: Int) {
        guard readableBytes == 0, capacity > threshold else { return }
        readIndex = 0
        writeIndex = 0
        base = realloc(base, size)!
        capacity = size
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        reserveWritable(bytes.count)
        (base + writeIndex).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        writeIndex += bytes.count
    }

    mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }
}
