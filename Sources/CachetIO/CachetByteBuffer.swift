#if canImport(Glibc)
import Glibc
#endif

/// A growable byte buffer with a read index and a write index, owned by one connection.
///
/// `~Copyable`: exactly one owner, freed when it goes away. Not thread-safe: a connection touches its
/// buffers only on its event loop's queue (or its one thread). Memory is a single `malloc` block that
/// grows by doubling (up to what is asked for) and is compacted by moving the unread bytes to the front,
/// so steady-state traffic allocates nothing.
public struct CachetByteBuffer: ~Copyable {
    /// The start of the memory.
    public private(set) var base: UnsafeMutableRawPointer
    /// Bytes allocated.
    public private(set) var capacity: Int
    /// Offset of the first unread byte.
    public private(set) var readIndex = 0
    /// Offset just past the last written byte.
    public private(set) var writeIndex = 0

    /// Creates an empty buffer.
    /// - Parameter capacity: bytes to allocate at first (at least 64).
    public init(capacity: Int) {
        self.capacity = max(capacity, 64)
        base = malloc(self.capacity)!
    }

    deinit { free(base) }

    /// Bytes written and not yet read.
    public var readableBytes: Int { writeIndex - readIndex }

    /// Room after the write index.
    public var writableBytes: Int { capacity - writeIndex }

    /// The unread bytes.
    public var readableRegion: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + readIndex, count: writeIndex - readIndex)
    }

    /// All bytes from the buffer's start to the write index: offsets in it are buffer offsets.
    public var wholeRegion: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: writeIndex) }

    /// Where the next written byte goes.
    public var writePointer: UnsafeMutableRawPointer { base + writeIndex }

    /// Marks the bytes before `offset` as read; an emptied buffer starts over at offset 0.
    /// - Parameter offset: a buffer offset between the read and write indexes.
    public mutating func moveReadIndex(to offset: Int) {
        precondition(offset >= readIndex && offset <= writeIndex)
        readIndex = offset
        if readIndex == writeIndex {
            readIndex = 0
            writeIndex = 0
        }
    }

    /// Marks `count` more bytes as read.
    /// - Parameter count: bytes, at most ``readableBytes``.
    public mutating func moveReadIndex(forwardBy count: Int) { moveReadIndex(to: readIndex + count) }

    /// Marks `count` bytes after the write index as written (after writing them at ``writePointer``).
    /// - Parameter count: bytes, at most ``writableBytes``.
    public mutating func moveWriteIndex(forwardBy count: Int) {
        precondition(count >= 0 && writeIndex + count <= capacity)
        writeIndex += count
    }

    /// Makes room for at least `count` more bytes after the write index: compacts first, grows if needed.
    /// - Parameter count: the room wanted.
    public mutating func reserveWritable(_ count: Int) {
        if writableBytes >= count { return }
        if readIndex > 0 {
            let unread = readableBytes
            if unread > 0 { memmove(base, base + readIndex, unread) }
            readIndex = 0
            writeIndex = unread
            if writableBytes >= count { return }
        }
        var newCapacity = capacity
        while newCapacity - writeIndex < count { newCapacity *= 2 }
        base = realloc(base, newCapacity)!
        capacity = newCapacity
    }

    /// Gives memory back when the buffer is empty and has grown past `threshold` (after a very large
    /// frame has passed), shrinking it to `size`.
    /// - Parameters:
    ///   - threshold: the capacity above which to shrink.
    ///   - size: the capacity to shrink to.
    public mutating func shrinkIfEmpty(above threshold: Int, to size: Int) {
        guard readableBytes == 0, capacity > threshold else { return }
        readIndex = 0
        writeIndex = 0
        base = realloc(base, size)!
        capacity = size
    }

    /// Forgets every byte (keeps the memory).
    public mutating func clear() {
        readIndex = 0
        writeIndex = 0
    }

    /// Appends bytes.
    /// - Parameter bytes: what to append.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        reserveWritable(bytes.count)
        (base + writeIndex).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        writeIndex += bytes.count
    }

    /// Appends bytes.
    /// - Parameter bytes: what to append.
    public mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// Writes at most `maximum` bytes in place at the write index: `body` gets the room and returns how many
    /// bytes it wrote.
    /// - Parameters:
    ///   - maximum: the room to reserve.
    ///   - body: writes and returns the count written (at most `maximum`).
    /// - Returns: what `body` returned.
    public mutating func write(reserving maximum: Int, _ body: (UnsafeMutableRawBufferPointer) -> Int) -> Int {
        reserveWritable(maximum)
        let written = body(UnsafeMutableRawBufferPointer(start: base + writeIndex, count: maximum))
        moveWriteIndex(forwardBy: written)
        return written
    }
}
