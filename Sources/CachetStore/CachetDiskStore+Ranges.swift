import CachetLocking

#if canImport(Glibc)
import Glibc
#endif

/// What a read of part of a value on disk came to (``CachetDiskStore/getRange(key:offset:length:limit:now:)``).
public enum CachetDiskRange: Sendable, Equatable {
    /// Absent, expired, unreadable or corrupt.
    case miss
    /// The range starts past the value's end: nothing to read; the value's length and tag.
    case unsatisfiable(total: Int, tag: UInt64)
    /// The bytes of the range (cut at the value's end and at the caller's limit), with the value's length,
    /// tag and expiry.
    case bytes(total: Int, tag: UInt64, expiry: UInt32, CachetDiskBytes)
}

/// Reads of part of a value: from its own blocks in a file of version 2, from the whole value in one of
/// version 1.
extension CachetDiskStore {
    /// Reads at most `limit` bytes of `key`'s value from `offset` (`length` bytes at most; `UInt64.max` to
    /// the end), checking everything it reads.
    /// - Parameters:
    ///   - key: the key.
    ///   - offset: the first byte's offset in the value.
    ///   - length: how many bytes at most.
    ///   - limit: the most bytes to return (a reply's room); the range is cut there.
    ///   - now: the current time; an expired entry is deleted and reads as absent.
    public func getRange(key: [UInt8], offset: UInt64, length: UInt64, limit: Int, now: UInt32) -> CachetDiskRange {
        getRange(key: key, digest: nil, offset: offset, length: length, limit: limit, now: now)
    }

    /// ``getRange(key:offset:length:limit:now:)`` with the key's digest if the caller has it already.
    func getRange(key: [UInt8], digest: KeyDigest?, offset: UInt64, length: UInt64, limit: Int, now: UInt32)
        -> CachetDiskRange
    {
        switch openRange(key: key, digest: digest, offset: offset, length: length, limit: limit, now: now) {
        case .done(let result): return result
        case .blocks(let reader): return finishRange(reader, reader.read())
        }
    }

    /// What opening a range came to: its answer already, or a file of version 2 to read its blocks from.
    enum RangeOpening {
        case done(CachetDiskRange)
        case blocks(CachetDiskRangeReader)
    }

    /// The part of ``getRange(key:offset:length:limit:now:)`` that must run in the disk queue's order: the
    /// index looked up, the file opened and its header and key checked. Reading the blocks can then happen
    /// anywhere (``CachetDiskRangeReader/read()``): the open descriptor keeps this version of the file even
    /// if a later write renames another over it or deletes it.
    func openRange(
        key: [UInt8],
        digest known: KeyDigest? = nil,
        offset: UInt64,
        length: UInt64,
        limit: Int,
        now: UInt32
    ) -> RangeOpening {
        let digest = known ?? key.withUnsafeBytes { KeyDigest(of: $0) }
        let opened = io.withLock { _ -> RangeOpening? in
            let (indexed, recovering, closed) = state.withLock {
                ($0.index.lookup(digest), $0.recovering, $0.closed)
            }
            guard !closed else { return .done(.miss) }
            if let node = indexed {
                if CachetClock.isExpired(node.expiry, now: now) {
                    discard(digest, reason: nil)
                    state.withLock { $0.statistics.expired += 1 }
                    return .done(.miss)
                }
            } else {
                // While the index is rebuilt, a key not in it yet is read from its file, unless the file may be
                // older than what was acknowledged (as `get` does).
                guard recovering, !state.withLock({ $0.staleClear || $0.staleFiles.contains(digest) }) else {
                    return .done(.miss)
                }
            }
            let file = path(for: digest).file
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT && indexed != nil { state.withLock { _ = $0.index.remove(digest) } }
                return .done(.miss)
            }
            var info = stat()
            var prefix = [UInt8](
                repeating: 0,
                count: fstat(fd, &info) == 0
                    ? min(Int(info.st_size), DiskEntryFormat.largestPrefixSize(keyLength: key.count)) : 0
            )
            guard !prefix.isEmpty, BlockEntryFormat.preadAll(fd, &prefix, at: 0) == nil else {
                Glibc.close(fd)
                return .done(.miss)
            }
            let header = prefix.withUnsafeBytes { DiskEntryFormat.decodeHeader($0) }
            // A file of version 1 is read whole, below.
            guard let header, header.isBlocked else {
                Glibc.close(fd)
                return header == nil ? .done(corruptRange(digest, file)) : nil
            }
            guard header.fileSize == Int(info.st_size), header.keyLength == key.count,
                Array(prefix[header.keyStart..<(header.keyStart + header.keyLength)]) == key
            else {
                Glibc.close(fd)
                return .done(corruptRange(digest, file))
            }
            guard !CachetClock.isExpired(header.expiry, now: now) else {
                Glibc.close(fd)
                return .done(.miss)
            }
            guard offset <= UInt64(header.valueLength) else {
                Glibc.close(fd)
                return .done(.unsatisfiable(total: header.valueLength, tag: header.tag))
            }
            state.withLock { state in
                state.index.touch(digest)
                state.statistics.hits += 1
            }
            let start = Int(offset)
            return .blocks(
                CachetDiskRangeReader(
                    fd: fd,
                    header: header,
                    start: start,
                    count: min(limit, Int(min(length, UInt64(header.valueLength - start)))),
                    digest: digest,
                    inode: UInt64(info.st_ino),
                    path: file
                )
            )
        }
        if let opened { return opened }
        // Version 1: the whole value, then the range.
        guard let entry = get(key: key, now: now) else { return .done(.miss) }
        let tag = entry.value.withUnsafeBytes { CachetValueTag.of($0) }
        guard offset <= UInt64(entry.value.count) else {
            return .done(.unsatisfiable(total: entry.value.count, tag: tag))
        }
        let start = Int(offset)
        let count = min(limit, Int(min(length, UInt64(entry.value.count - start))))
        return .done(
            .bytes(
                total: entry.value.count,
                tag: tag,
                expiry: entry.expiry,
                entry.value.withUnsafeBytes {
                    CachetDiskBytes(copying: UnsafeRawBufferPointer(rebasing: $0[start..<(start + count)]))
                }
            )
        )
    }

    /// The answer to a range whose blocks `reader` read: a file found corrupt is deleted, if it is still
    /// the key's file (a write may have replaced it since it was opened), and the range is a miss.
    func finishRange(_ reader: CachetDiskRangeReader, _ read: BlockEntryFormat.RangeRead) -> CachetDiskRange {
        switch read {
        case .bytes(let bytes):
            return .bytes(total: reader.header.valueLength, tag: reader.header.tag, expiry: reader.header.expiry, bytes)
        case .corrupt:
            io.withLock { _ in
                var info = stat()
                guard stat(reader.path, &info) == 0, UInt64(info.st_ino) == reader.inode else { return }
                _ = corruptRange(reader.digest, reader.path)
            }
            return .miss
        case .failed(let code):
            warnFailure(
                "disk read failed",
                metadata: ["disk.path": "\(reader.path)", "error.message": "\(DiskFiles.describe(code))"]
            )
            state.withLock { $0.statistics.errors += 1 }
            return .miss
        }
    }

    /// Deletes a file found corrupt by a range read. Called with the I/O lock held.
    private func corruptRange(_ digest: KeyDigest, _ file: String) -> CachetDiskRange {
        warnFailure("corrupt entry file deleted", metadata: ["disk.path": "\(file)"])
        discard(digest, reason: .corrupt)
        return .miss
    }

    /// The length of `key`'s value as the index records it, without reading its file; nil when the index
    /// does not list it (or is still being rebuilt).
    public func indexedValueLength(key: [UInt8]) -> Int? {
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        return state.withLock { $0.index.lookup(digest).map { $0.logicalSize - key.count } }
    }
}

/// A file of version 2 opened in the disk queue's order for a range (``CachetDiskStore/openRange``): its
/// blocks are read by ``read()``, on any thread; the descriptor closes with it.
final class CachetDiskRangeReader: @unchecked Sendable {
    let fd: Int32
    let header: DiskEntryFormat.Header
    let start: Int
    let count: Int
    let digest: KeyDigest
    let inode: UInt64
    let path: String

    init(
        fd: Int32,
        header: DiskEntryFormat.Header,
        start: Int,
        count: Int,
        digest: KeyDigest,
        inode: UInt64,
        path: String
    ) {
        self.fd = fd
        self.header = header
        self.start = start
        self.count = count
        self.digest = digest
        self.inode = inode
        self.path = path
    }

    deinit { Glibc.close(fd) }

    /// The range's bytes, read from its blocks and checked.
    func read() -> BlockEntryFormat.RangeRead {
        BlockEntryFormat.readRange(fd: fd, header: header, start: start, count: count)
    }

    /// The block table, read once for a reader that reads many pieces (``read(start:count:)``).
    private let table = CachetLock<BlockEntryFormat.BlockTable?>(nil)

    /// `count` bytes of the value from `start`, read from their blocks and checked; the block table is read
    /// on the first call only.
    func read(start: Int, count: Int) -> BlockEntryFormat.RangeRead {
        let known = table.withLock { $0 }
        let blocks: BlockEntryFormat.BlockTable
        if let known {
            blocks = known
        } else {
            switch BlockEntryFormat.readTable(fd: fd, header: header) {
            case .success(let read):
                blocks = read
                table.withLock { $0 = read }
            case .failure(let failure):
                return failure.read
            }
        }
        return BlockEntryFormat.readRange(fd: fd, header: header, table: blocks, start: start, count: count)
    }
}

/// What opening a whole value to read it in pieces came to
/// (``CachetDiskWorker/openValue(key:now:completion:)``).
public enum CachetDiskValueOpening: Sendable {
    /// Absent, expired, unreadable or corrupt.
    case miss
    /// A value kept in a file of version 1, read whole: its bytes and expiry.
    case whole(CachetDiskEntry)
    /// A value kept in blocks, opened: read it a piece at a time (``CachetDiskWorker/readPiece(of:start:count:completion:)``).
    case pieces(CachetDiskValuePieces)
}

/// A value kept in blocks on disk, opened in the disk queue's order to be read a piece at a time (a GET
/// answered in several frames): the open file is this version of the value even if a later write replaces
/// or deletes it, so every piece comes from one value. Closed when the last reference goes.
public final class CachetDiskValuePieces: Sendable {
    /// The value's length in bytes.
    public let total: Int
    /// The value's tag (``CachetValueTag``).
    public let tag: UInt64
    /// Its expiry (Unix seconds, 0 for none) when it was opened.
    public let expiry: UInt32
    let reader: CachetDiskRangeReader

    init(_ reader: CachetDiskRangeReader) {
        self.reader = reader
        self.total = reader.header.valueLength
        self.tag = reader.header.tag
        self.expiry = reader.header.expiry
    }
}

extension CachetDiskStore {
    /// Opens `key`'s value to be read a piece at a time. Runs in the disk queue's order.
    func openValue(key: [UInt8], now: UInt32) -> CachetDiskValueOpening {
        switch openRange(key: key, offset: 0, length: UInt64.max, limit: Int.max, now: now) {
        case .blocks(let reader): return .pieces(CachetDiskValuePieces(reader))
        case .done(.bytes(_, _, let expiry, let bytes)):
            return .whole(CachetDiskEntry(value: bytes.array, expiry: expiry))
        case .done(.miss), .done(.unsatisfiable): return .miss
        }
    }

    /// `count` bytes of an opened value from `start`, checked; nil when a block is found damaged (the file
    /// is then deleted if it is still the key's) or the read fails.
    func readPiece(of value: CachetDiskValuePieces, start: Int, count: Int) -> [UInt8]? {
        let reader = value.reader
        guard case .bytes(_, _, _, let bytes) = finishRange(reader, reader.read(start: start, count: count)) else {
            return nil
        }
        return bytes.array
    }
}
