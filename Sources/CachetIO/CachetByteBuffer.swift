#if canImport(Glibc)
import Glibc
#endif

/// A growable byte buffer with a read index and a write index, owned by one connection.
///
/// `~Copyable`: exactly one owner, freed when it goes away. Not thread-safe: a connection touches its
/// buffers only on its event loop's queue (or its one thread). Memory is a single `malloc` block,
/// compacted by moving the unread bytes to the front, so steady-state traffic allocates nothing. It grows
/// by doubling while small and by at most ``largestGrowthStep`` at a time once large (but always by at
/// least what is asked), so its size follows the bytes it must hold rather than racing ahead of them;
/// ``resize(to:)`` and ``shrinkIfEmpty(above:to:)`` give memory back (the node's connection memory budget
/// relies on both).
///
/// The accessors and the fast paths are `@inlinable`, so that code in other modules (the node, the load
/// generator) compiles them inline as it did with a buffer of its own; growing and compacting stay out of
/// line.
public struct CachetByteBuffer: ~Copyable {
    @usableFromInline var _base: UnsafeMutableRawPointer
    @usableFromInline var _capacity: Int
    @usableFromInline var _readIndex = 0
    @usableFromInline var _writeIndex = 0

    /// Creates an empty buffer.
    /// - Parameter capacity: bytes to allocate at first (at least 64).
    public init(capacity: Int) {
        _capacity = max(capacity, 64)
        _base = malloc(_capacity)!
    }

    deinit { free(_base) }

    /// The start of the memory.
    @inlinable public var base: UnsafeMutableRawPointer { _base }
    /// Bytes allocated.
    @inlinable public var capacity: Int { _capacity }
    /// Offset of the first unread byte.
    @inlinable public var readIndex: Int { _readIndex }
    /// Offset just past the last written byte.
    @inlinable public var writeIndex: Int { _writeIndex }

    /// Bytes written and not yet read.
    @inlinable public var readableBytes: Int { _writeIndex - _readIndex }

    /// Room after the write index.
    @inlinable public var writableBytes: Int { _capacity - _writeIndex }

    /// The unread bytes.
    @inlinable public var readableRegion: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: _base + _readIndex, count: _writeIndex - _readIndex)
    }

    /// All bytes from the buffer's start to the write index: offsets in it are buffer offsets.
    @inlinable public var wholeRegion: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: _base, count: _writeIndex)
    }

    /// Where the next written byte goes.
    @inlinable public var writePointer: UnsafeMutableRawPointer { _base + _writeIndex }

    /// Marks the bytes before `offset` as read; an emptied buffer starts over at offset 0.
    /// - Parameter offset: a buffer offset between the read and write indexes.
    @inlinable
    public mutating func moveReadIndex(to offset: Int) {
        precondition(offset >= _readIndex && offset <= _writeIndex)
        _readIndex = offset
        if _readIndex == _writeIndex {
            _readIndex = 0
            _writeIndex = 0
        }
    }

    /// Marks `count` more bytes as read.
    /// - Parameter count: bytes, at most ``readableBytes``.
    @inlinable
    public mutating func moveReadIndex(forwardBy count: Int) { moveReadIndex(to: _readIndex + count) }

    /// Marks `count` bytes after the write index as written (after writing them at ``writePointer``).
    /// - Parameter count: bytes, at most ``writableBytes``.
    @inlinable
    public mutating func moveWriteIndex(forwardBy count: Int) {
        precondition(count >= 0 && _writeIndex + count <= _capacity)
        _writeIndex += count
    }

    /// Forgets the readable bytes after the first `count` (a writer that takes back what it appended).
    /// - Parameter count: bytes to keep, at most ``readableBytes``.
    @inlinable
    public mutating func keepReadable(_ count: Int) {
        precondition(count >= 0 && count <= readableBytes)
        _writeIndex = _readIndex + count
        if _readIndex == _writeIndex {
            _readIndex = 0
            _writeIndex = 0
        }
    }

    /// Makes room for at least `count` more bytes after the write index: compacts first, grows if needed.
    /// - Parameter count: the room wanted.
    @inlinable
    public mutating func reserveWritable(_ count: Int) {
        if writableBytes >= count { return }
        makeRoom(count)
    }

    /// The slow path of ``reserveWritable(_:)``.
    @usableFromInline
    mutating func makeRoom(_ count: Int) {
        compact()
        if writableBytes >= count { return }
        resize(to: max(_writeIndex + count, _capacity + min(_capacity, Self.largestGrowthStep)))
    }

    /// The most a buffer grows by beyond what it was asked for, once it is large.
    public static let largestGrowthStep = 1 << 20

    /// Moves the unread bytes to the front, so that all free room follows them.
    public mutating func compact() {
        guard _readIndex > 0 else { return }
        let unread = readableBytes
        if unread > 0 { memmove(_base, _base + _readIndex, unread) }
        _readIndex = 0
        _writeIndex = unread
    }

    /// Reallocates to exactly `newCapacity` bytes (at least the unread bytes, and 64), compacting first.
    /// - Parameter newCapacity: the capacity wanted.
    public mutating func resize(to newCapacity: Int) {
        compact()
        let size = max(newCapacity, _writeIndex, 64)
        guard size != _capacity else { return }
        _base = realloc(_base, size)!
        _capacity = size
    }

    /// Gives memory back when the buffer is empty and has grown past `threshold` (after a very large
    /// frame has passed), shrinking it to `size`.
    /// - Parameters:
    ///   - threshold: the capacity above which to shrink.
    ///   - size: the capacity to shrink to.
    public mutating func shrinkIfEmpty(above threshold: Int, to size: Int) {
        guard readableBytes == 0, _capacity > threshold else { return }
        _readIndex = 0
        _writeIndex = 0
        _base = realloc(_base, size)!
        _capacity = size
    }

    /// Forgets every byte (keeps the memory).
    @inlinable
    public mutating func clear() {
        _readIndex = 0
        _writeIndex = 0
    }

    /// Appends bytes.
    /// - Parameter bytes: what to append.
    @inlinable
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        reserveWritable(bytes.count)
        (_base + _writeIndex).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        _writeIndex += bytes.count
    }

    /// Appends the UTF-8 of a literal (a reply's fixed words: no array, so no reference count to touch).
    /// - Parameter text: what to append.
    @inlinable
    public mutating func append(_ text: StaticString) {
        append(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Appends bytes.
    /// - Parameter bytes: what to append.
    @inlinable
    public mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// Writes at most `maximum` bytes in place at the write index: `body` gets the room and returns how many
    /// bytes it wrote.
    /// - Parameters:
    ///   - maximum: the room to reserve.
    ///   - body: writes and returns the count written (at most `maximum`).
    /// - Returns: what `body` returned.
    @inlinable
    public mutating func write(reserving maximum: Int, _ body: (UnsafeMutableRawBufferPointer) -> Int) -> Int {
        reserveWritable(maximum)
        let written = body(UnsafeMutableRawBufferPointer(start: _base + _writeIndex, count: maximum))
        moveWriteIndex(forwardBy: written)
        return written
    }
}
