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
    case bytes(total: Int, tag: UInt64, expiry: UInt32, [UInt8])
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
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        let blocked = io.withLock { _ -> CachetDiskRange? in
            let (indexed, recovering, closed) = state.withLock {
                ($0.index.lookup(digest), $0.recovering, $0.closed)
            }
            guard !closed else { return .miss }
            guard let node = indexed else { return recovering ? nil : .miss }
            if CachetClock.isExpired(node.expiry, now: now) {
                discard(digest, reason: nil)
                state.withLock { $0.statistics.expired += 1 }
                return .miss
            }
            let file = path(for: digest).file
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT { state.withLock { _ = $0.index.remove(digest) } }
                return .miss
            }
            defer { Glibc.close(fd) }
            var info = stat()
            guard fstat(fd, &info) == 0 else { return .miss }
            var prefix = [UInt8](
                repeating: 0,
                count: min(Int(info.st_size), DiskEntryFormat.largestHeaderSize + key.count)
            )
            guard BlockEntryFormat.preadAll(fd, &prefix, at: 0) == nil else { return .miss }
            let header = prefix.withUnsafeBytes { DiskEntryFormat.decodeHeader($0) }
            // A file of version 1 is read whole, below.
            guard let header, header.isBlocked else { return header == nil ? corruptRange(digest, file) : nil }
            guard header.fileSize == Int(info.st_size), header.keyLength == key.count,
                Array(prefix[header.keyStart..<(header.keyStart + header.keyLength)]) == key
            else { return corruptRange(digest, file) }
            guard offset <= UInt64(header.valueLength) else {
                return .unsatisfiable(total: header.valueLength, tag: header.tag)
            }
            let start = Int(offset)
            let count = min(limit, Int(min(length, UInt64(header.valueLength - start))))
            switch BlockEntryFormat.readRange(fd: fd, header: header, start: start, count: count) {
            case .bytes(let bytes):
                state.withLock { state in
                    state.index.touch(digest)
                    state.statistics.hits += 1
                }
                return .bytes(total: header.valueLength, tag: header.tag, expiry: header.expiry, bytes)
            case .corrupt:
                return corruptRange(digest, file)
            case .failed(let code):
                warnFailure(
                    "disk read failed",
                    metadata: ["disk.path": "\(file)", "error.message": "\(DiskFiles.describe(code))"]
                )
                state.withLock { $0.statistics.errors += 1 }
                return .miss
            }
        }
        if let blocked { return blocked }
        // Version 1, or a key not indexed yet while the index is rebuilt: the whole value, then the range.
        guard let entry = get(key: key, now: now) else { return .miss }
        let tag = entry.value.withUnsafeBytes { CachetValueTag.of($0) }
        guard offset <= UInt64(entry.value.count) else { return .unsatisfiable(total: entry.value.count, tag: tag) }
        let start = Int(offset)
        let count = min(limit, Int(min(length, UInt64(entry.value.count - start))))
        return .bytes(
            total: entry.value.count,
            tag: tag,
            expiry: entry.expiry,
            Array(entry.value[start..<(start + count)])
        )
    }

    /// Deletes a file found corrupt by a range read. Called with the I/O lock held.
    private func corruptRange(_ digest: KeyDigest, _ file: String) -> CachetDiskRange {
        warnFailure("corrupt entry file deleted", metadata: ["disk.path": "\(file)"])
        discard(digest, reason: .corrupt)
        return .miss
    }

    /// The length of `key`'s value as the index records it, without reading its file; nil when the index
    /// does not list it (or is still being rebuilt).
    func indexedValueLength(key: [UInt8]) -> Int? {
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        return state.withLock { $0.index.lookup(digest).map { $0.logicalSize - key.count } }
    }
}
