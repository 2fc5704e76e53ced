import CZlib

#if canImport(Glibc)
import Glibc
#endif

/// The layout of an entry file of version 2: the value in independently compressed blocks behind a block
/// table, so that a range of it is read from its own blocks and nothing else. Values of
/// ``threshold`` bytes or more are written so; shorter ones keep version 1 (``DiskEntryFormat``).
/// `Protocol/DISK-FORMAT.md`, "Entry file in blocks", is the normative description.
///
/// ```
/// offset  0  magic "CCHE"                      4 bytes
/// offset  4  format version (2)                1 byte
/// offset  5  flags (0)                         1 byte
/// offset  6  key length                        u16
/// offset  8  expiry (Unix s, 0 none)           u32
/// offset 12  value length                      u64
/// offset 20  payload length (blocks as stored) u64
/// offset 28  block size                        u32
/// offset 32  value tag                         u64
/// offset 40  CRC-32 of bytes 0..<40 and the key   u32
/// offset 44  key
///            block table: per block its stored length (u32) and the CRC-32 of its bytes (u32),
///            then the CRC-32 of the table (u32)
///            the blocks, back to back
/// ```
/// A block is stored deflated exactly when its stored length is below its length (deflating must save
/// ``DiskEntryFormat/minimumSaving``), raw otherwise. All integers big-endian.
enum BlockEntryFormat {
    static let version: UInt8 = 2
    static let headerSize = 44
    /// Bytes of value per block (the last may hold fewer).
    static let blockSize = 256 * 1024
    /// Values at least this long are written in blocks.
    static let threshold = 1 << 20
    /// The longest value a file may hold (1 TiB): its block table, which a range read takes whole, stays
    /// within 32 MiB.
    static let maximumValueLength = 1 << 40

    static func blockCount(valueLength: Int, blockSize: Int) -> Int {
        blockSize > 0 ? (valueLength + blockSize - 1) / blockSize : 0
    }

    static func tableSize(blockCount: Int) -> Int { blockCount * 8 + 4 }

    /// The bytes of value block `index` holds.
    static func length(ofBlock index: Int, valueLength: Int, blockSize: Int) -> Int {
        min(blockSize, valueLength - index * blockSize)
    }

    /// The header and the key: what is written last, once every block is in place.
    static func encodeHeader(
        key: [UInt8],
        expiry: UInt32,
        valueLength: Int,
        payloadLength: Int,
        blockSize: Int,
        tag: UInt64
    ) -> [UInt8] {
        var bytes = DiskEntryFormat.magic
        bytes.reserveCapacity(headerSize + key.count)
        bytes.append(version)
        bytes.append(0)
        DiskEntryFormat.append(UInt16(key.count), to: &bytes)
        DiskEntryFormat.append(expiry, to: &bytes)
        DiskEntryFormat.append(UInt64(valueLength), to: &bytes)
        DiskEntryFormat.append(UInt64(payloadLength), to: &bytes)
        DiskEntryFormat.append(UInt32(blockSize), to: &bytes)
        DiskEntryFormat.append(tag, to: &bytes)
        let crc = bytes.withUnsafeBytes { head in
            key.withUnsafeBytes { DiskEntryFormat.crc32($0, seed: DiskEntryFormat.crc32(head)) }
        }
        DiskEntryFormat.append(crc, to: &bytes)
        bytes += key
        return bytes
    }

    /// Parses and checks a version 2 header and the key after it.
    static func decodeHeader(_ bytes: UnsafeRawBufferPointer) -> DiskEntryFormat.Header? {
        guard bytes.count >= headerSize, bytes[4] == version, bytes[5] == 0 else { return nil }
        let valueLength = DiskEntryFormat.read(UInt64.self, bytes, at: 12)
        let payloadLength = DiskEntryFormat.read(UInt64.self, bytes, at: 20)
        let blockSize = Int(DiskEntryFormat.read(UInt32.self, bytes, at: 28))
        let keyLength = Int(DiskEntryFormat.read(UInt16.self, bytes, at: 6))
        guard valueLength <= UInt64(maximumValueLength), payloadLength <= UInt64(maximumValueLength),
            (1...DiskEntryFormat.maximumKeyLength).contains(keyLength), bytes.count >= headerSize + keyLength,
            (4096...(64 << 20)).contains(blockSize)
        else { return nil }
        let header = DiskEntryFormat.Header(
            version: version,
            flags: 0,
            keyLength: keyLength,
            expiry: DiskEntryFormat.read(UInt32.self, bytes, at: 8),
            valueLength: Int(valueLength),
            payloadLength: Int(payloadLength),
            valueCRC: 0,
            headerCRC: DiskEntryFormat.read(UInt32.self, bytes, at: 40),
            blockSize: blockSize,
            tag: DiskEntryFormat.read(UInt64.self, bytes, at: 32)
        )
        let computed = DiskEntryFormat.crc32(
            UnsafeRawBufferPointer(rebasing: bytes[headerSize..<(headerSize + keyLength)]),
            seed: DiskEntryFormat.crc32(UnsafeRawBufferPointer(rebasing: bytes[0..<40]))
        )
        return computed == header.headerCRC ? header : nil
    }

    /// One block as stored: deflated when that pays, else its own bytes; and the CRC-32 of its bytes.
    static func storeBlock(_ block: UnsafeBufferPointer<UInt8>, level: Int32) -> (stored: [UInt8]?, crc: UInt32) {
        (DiskEntryFormat.compressIfWorthIt(block, level: level), DiskEntryFormat.crc32(UnsafeRawBufferPointer(block)))
    }

    /// Appends one block's table entry.
    static func appendTableEntry(storedLength: Int, crc: UInt32, to table: inout [UInt8]) {
        DiskEntryFormat.append(UInt32(storedLength), to: &table)
        DiskEntryFormat.append(crc, to: &table)
    }

    /// Builds a whole file in memory (a PUT's value, which arrived whole): header, key, table, blocks.
    static func encode(key: [UInt8], value: [UInt8], expiry: UInt32, level: Int32) -> (file: [UInt8], compressed: Bool)
    {
        let count = blockCount(valueLength: value.count, blockSize: blockSize)
        var table = [UInt8]()
        table.reserveCapacity(tableSize(blockCount: count))
        var payload = [UInt8]()
        payload.reserveCapacity(value.count)
        var compressed = false
        value.withUnsafeBufferPointer { value in
            for index in 0..<count {
                let start = index * blockSize
                let block = UnsafeBufferPointer(
                    rebasing: value[
                        start..<(start + length(ofBlock: index, valueLength: value.count, blockSize: blockSize))
                    ]
                )
                let (stored, crc) = storeBlock(block, level: level)
                if let stored {
                    payload += stored
                    compressed = true
                } else {
                    payload.append(contentsOf: block)
                }
                appendTableEntry(storedLength: stored?.count ?? block.count, crc: crc, to: &table)
            }
        }
        DiskEntryFormat.append(table.withUnsafeBytes { DiskEntryFormat.crc32($0) }, to: &table)
        let tag = value.withUnsafeBytes { CachetValueTag.of($0) }
        var file = encodeHeader(
            key: key,
            expiry: expiry,
            valueLength: value.count,
            payloadLength: payload.count,
            blockSize: blockSize,
            tag: tag
        )
        file.reserveCapacity(file.count + table.count + payload.count)
        file += table
        file += payload
        return (file, compressed)
    }

    /// The block table of a file whose header is `header`: each block's stored length and CRC-32, checked
    /// against the table's CRC and against the payload length; nil when they disagree.
    static func decodeTable(_ bytes: UnsafeRawBufferPointer, header: DiskEntryFormat.Header) -> [(
        stored: Int, crc: UInt32
    )]? {
        let count = header.blockCount
        guard bytes.count == tableSize(blockCount: count),
            DiskEntryFormat.crc32(UnsafeRawBufferPointer(rebasing: bytes[0..<(count * 8)]))
                == DiskEntryFormat.read(UInt32.self, bytes, at: count * 8)
        else { return nil }
        var entries: [(stored: Int, crc: UInt32)] = []
        entries.reserveCapacity(count)
        var total = 0
        for index in 0..<count {
            let stored = Int(DiskEntryFormat.read(UInt32.self, bytes, at: index * 8))
            let length = length(ofBlock: index, valueLength: header.valueLength, blockSize: header.blockSize)
            guard stored <= length else { return nil }
            total += stored
            entries.append((stored, DiskEntryFormat.read(UInt32.self, bytes, at: index * 8 + 4)))
        }
        return total == header.payloadLength ? entries : nil
    }

    /// Decodes one stored block into `out` (its length), checking its CRC.
    static func decodeBlock(_ stored: UnsafeRawBufferPointer, crc: UInt32, into out: UnsafeMutableRawBufferPointer)
        -> Bool
    {
        if stored.count == out.count {
            if out.count > 0 { out.baseAddress!.copyMemory(from: stored.baseAddress!, byteCount: out.count) }
        } else {
            var length = UInt(out.count)
            let result = uncompress(
                out.baseAddress?.assumingMemoryBound(to: UInt8.self),
                &length,
                stored.baseAddress?.assumingMemoryBound(to: UInt8.self),
                UInt(stored.count)
            )
            guard result == Z_OK, Int(length) == out.count else { return false }
        }
        return DiskEntryFormat.crc32(UnsafeRawBufferPointer(out)) == crc
    }

    /// The value of a whole version 2 file already read (`raw`, whose header is `header`), checked block by
    /// block; nil when anything disagrees.
    static func decodeValue(_ raw: UnsafeRawBufferPointer, header: DiskEntryFormat.Header) -> [UInt8]? {
        let tableStart = header.keyStart + header.keyLength
        guard raw.count == header.fileSize,
            let table = decodeTable(
                UnsafeRawBufferPointer(rebasing: raw[tableStart..<header.payloadStart]),
                header: header
            )
        else { return nil }
        var value = [UInt8](repeating: 0, count: header.valueLength)
        var position = header.payloadStart
        let fine = value.withUnsafeMutableBytes { out -> Bool in
            for (index, block) in table.enumerated() {
                let start = index * header.blockSize
                let length = length(ofBlock: index, valueLength: header.valueLength, blockSize: header.blockSize)
                guard
                    decodeBlock(
                        UnsafeRawBufferPointer(rebasing: raw[position..<(position + block.stored)]),
                        crc: block.crc,
                        into: UnsafeMutableRawBufferPointer(rebasing: out[start..<(start + length)])
                    )
                else { return false }
                position += block.stored
            }
            return true
        }
        return fine ? value : nil
    }

    /// What reading part of a version 2 file came to.
    enum RangeRead {
        case bytes(CachetDiskBytes)
        /// Something failed its check: the file is corrupt.
        case corrupt
        /// A read failed (errno).
        case failed(Int32)
    }

    /// Reads `count` bytes of value from `start` of an open version 2 file whose header (and key) were
    /// checked: the table, then only the blocks the range touches.
    static func readRange(fd: Int32, header: DiskEntryFormat.Header, start: Int, count: Int) -> RangeRead {
        switch readTable(fd: fd, header: header) {
        case .success(let table): return readRange(fd: fd, header: header, table: table, start: start, count: count)
        case .failure(let failure): return failure.read
        }
    }

    /// A file's block table, as ``decodeTable(_:header:)`` gives it.
    typealias BlockTable = [(stored: Int, crc: UInt32)]

    /// Why a block table could not be read (a ``RangeRead`` other than bytes).
    struct TableFailure: Error {
        let read: RangeRead
    }

    /// Reads and checks the block table of an open version 2 file whose header is `header`.
    static func readTable(fd: Int32, header: DiskEntryFormat.Header) -> Result<BlockTable, TableFailure> {
        var tableBytes = [UInt8](repeating: 0, count: tableSize(blockCount: header.blockCount))
        if let failure = preadAll(fd, &tableBytes, at: header.keyStart + header.keyLength) {
            return .failure(TableFailure(read: failure))
        }
        guard let table = tableBytes.withUnsafeBytes({ decodeTable($0, header: header) }) else {
            return .failure(TableFailure(read: .corrupt))
        }
        return .success(table)
    }

    /// Reads `count` bytes of value from `start` of an open version 2 file whose table was read already,
    /// into a buffer of ``CachetDiskBytes/pool``: pages mapped already, so a range costs no page faults.
    static func readRange(
        fd: Int32,
        header: DiskEntryFormat.Header,
        table: BlockTable,
        start: Int,
        count: Int
    ) -> RangeRead {
        let result = CachetDiskBytes(count: max(0, count))
        guard count > 0 else { return .bytes(result) }
        let first = start / header.blockSize
        let last = (start + count - 1) / header.blockSize
        var offset = header.payloadStart
        for index in 0..<first { offset += table[index].stored }
        let out = result.mutableBytes
        // Filled in place: a block stored raw and wholly inside the range is read straight into it (a
        // video's blocks are); any other block through a scratch buffer (stored, then decoded), inflated or
        // cut there. A random range of a video has two such blocks, its first and its last.
        let scratchSize = LargeBlockPool.blockSize(for: 2 * header.blockSize)
        var scratch: UnsafeMutableRawPointer?
        defer { if let scratch { CachetDiskBytes.pool.release(scratch, size: scratchSize) } }
        for index in first...last {
            let entry = table[index]
            let length = length(ofBlock: index, valueLength: header.valueLength, blockSize: header.blockSize)
            let blockStart = index * header.blockSize
            let from = max(start, blockStart)
            let to = min(start + count, blockStart + length)
            defer { offset += entry.stored }
            if entry.stored == length && from == blockStart && to == blockStart + length {
                let target = UnsafeMutableRawBufferPointer(rebasing: out[(from - start)..<(to - start)])
                if let problem = preadAll(fd, into: target, at: offset) { return problem }
                guard DiskEntryFormat.crc32(UnsafeRawBufferPointer(target)) == entry.crc else { return .corrupt }
                continue
            }
            // The stored bytes at the scratch's start, the decoded ones at its end: both at most a block
            // (`decodeTable` checked the stored lengths against the blocks').
            let buffer = scratch ?? CachetDiskBytes.pool.allocate(size: scratchSize)
            scratch = buffer
            let stored = UnsafeMutableRawBufferPointer(start: buffer, count: entry.stored)
            if let problem = preadAll(fd, into: stored, at: offset) { return problem }
            let decoded = UnsafeMutableRawBufferPointer(start: buffer + scratchSize - length, count: length)
            guard decodeBlock(UnsafeRawBufferPointer(stored), crc: entry.crc, into: decoded) else { return .corrupt }
            (out.baseAddress! + (from - start)).copyMemory(
                from: decoded.baseAddress! + (from - blockStart),
                byteCount: to - from
            )
        }
        return .bytes(result)
    }

    /// `pread`s `bytes.count` bytes into `bytes` from `offset`; a failure, or `.corrupt` when the file ends first.
    static func preadAll(_ fd: Int32, into bytes: UnsafeMutableRawBufferPointer, at offset: Int) -> RangeRead? {
        var done = 0
        while done < bytes.count {
            let n = pread(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset + done))
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return .failed(errno) }
            if n == 0 { return .corrupt }
            done += n
        }
        return nil
    }

    /// `pread`s all of `bytes` from `offset`; a failure, or `.corrupt` when the file ends first.
    static func preadAll(_ fd: Int32, _ bytes: inout [UInt8], at offset: Int) -> RangeRead? {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeMutableBytes {
                pread(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done))
            }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return .failed(errno) }
            if n == 0 { return .corrupt }
            done += n
        }
        return nil
    }
}

/// A value's tag: the CRC-32 of its bytes in the high 32 bits and their Adler-32 in the low ones. Equal
/// values have equal tags on every node and in either tier; a value replaced by another of the same length
/// has the same tag only by a 64-bit coincidence of two checksums. What a range read's reply carries so
/// that a reader of several ranges can tell that the value changed between them, and what HTTP sends as
/// the `ETag`.
public struct CachetValueTag: Sendable {
    private var crc: UInt32 = 0
    private var adler: UInt = 1

    /// A tag of no bytes yet.
    public init() {}

    /// The tag of `bytes`.
    public static func of(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var tag = CachetValueTag()
        tag.add(bytes)
        return tag.value
    }

    /// Takes the next bytes of the value.
    public mutating func add(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return }
        crc = CachetCRC32.update(crc, bytes)
        var offset = 0
        while offset < bytes.count {
            let chunk = min(bytes.count - offset, 1 << 30)
            adler = CZlib.adler32(adler, base + offset, UInt32(chunk))
            offset += chunk
        }
    }

    /// The tag of the bytes taken so far.
    public var value: UInt64 {
        UInt64(crc) << 32 | UInt64(UInt32(truncatingIfNeeded: adler))
    }
}

/// The bytes of a range read from disk (``CachetDiskRange``), in a buffer of their own that goes back to a
/// pool for the next read when the last copy of this value is dropped: a 1 MiB range then writes into pages
/// that are mapped already instead of faulting in a fresh allocation's 256 pages. Immutable once read.
public struct CachetDiskBytes: Sendable, Equatable, CustomStringConvertible {
    /// The buffers of reads: a few ranges' worth, so that the ranges in flight at once reuse them.
    static let pool = LargeBlockPool(limit: 16 << 20)

    private final class Storage: @unchecked Sendable {
        let base: UnsafeMutableRawPointer?
        let size: Int
        let count: Int

        init(count: Int) {
            self.count = count
            size = LargeBlockPool.blockSize(for: count)
            base = count > 0 ? CachetDiskBytes.pool.allocate(size: size) : nil
        }

        deinit { if let base { CachetDiskBytes.pool.release(base, size: size) } }
    }

    private let storage: Storage

    /// `count` bytes, not written yet (the reader fills them through ``mutableBytes`` before handing them on).
    init(count: Int) {
        storage = Storage(count: count)
    }

    /// Bytes copied from `bytes`.
    public init(_ bytes: [UInt8]) {
        storage = Storage(count: bytes.count)
        bytes.withUnsafeBytes { if $0.count > 0 { mutableBytes.copyMemory(from: $0) } }
    }

    /// Bytes copied from `bytes`.
    init(copying bytes: UnsafeRawBufferPointer) {
        storage = Storage(count: bytes.count)
        if bytes.count > 0 { mutableBytes.copyMemory(from: bytes) }
    }

    /// For the reader only, before the bytes are handed on.
    var mutableBytes: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(start: storage.base, count: storage.count)
    }

    /// How many bytes.
    public var count: Int { storage.count }

    /// Calls `body` with the bytes, valid only during the call.
    public func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try withExtendedLifetime(storage) {
            try body(UnsafeRawBufferPointer(start: storage.base, count: storage.count))
        }
    }

    /// The bytes as an array (a copy).
    public var array: [UInt8] { withUnsafeBytes { Array($0) } }

    /// Whether the two hold the same bytes.
    public static func == (lhs: CachetDiskBytes, rhs: CachetDiskBytes) -> Bool {
        lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in a.elementsEqual(b) } }
    }

    /// Whether the bytes are `rhs`'s.
    public static func == (lhs: CachetDiskBytes, rhs: [UInt8]) -> Bool {
        lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in a.elementsEqual(b) } }
    }

    /// How many bytes, for logs and test failures (never the bytes themselves).
    public var description: String { "\(count) bytes" }
}
