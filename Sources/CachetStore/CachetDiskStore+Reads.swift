import CachetLocking
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Reads: a key's entry, whether it is there, and the sweep of expired entries.
extension CachetDiskStore {
    /// Reads an entry, checking everything the file carries.
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the current time; an expired entry is deleted and reads as absent.
    ///   - maximumValueLength: a value the index lists as longer is not read: the entry returned has an
    ///     empty value and says its length in ``CachetDiskEntry/oversizedLength``.
    /// - Returns: the value and its expiry, or nil when absent, expired, unreadable or corrupt.
    public func get(key: [UInt8], now: UInt32, maximumValueLength: Int = .max) -> CachetDiskEntry? {
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        return io.withLock { _ -> CachetDiskEntry? in
            let (indexed, recovering, closed) = state.withLock {
                ($0.index.lookup(digest), $0.recovering, $0.closed)
            }
            // Once closed, the directory may belong to another node.
            guard !closed else { return nil }
            guard let node = indexed else {
                return recovering
                    ? readUnindexed(key: key, digest: digest, now: now, maximumValueLength: maximumValueLength) : nil
            }
            if CachetClock.isExpired(node.expiry, now: now) {
                discard(digest, reason: nil)
                state.withLock { $0.statistics.expired += 1 }
                return nil
            }
            if node.logicalSize - key.count > maximumValueLength {
                var entry = CachetDiskEntry(value: [], expiry: node.expiry)
                entry.oversizedLength = node.logicalSize - key.count
                return entry
            }
            let file = path(for: digest).file
            switch DiskFiles.read(file) {
            case .missing:
                state.withLock { _ = $0.index.remove(digest) }
                return nil
            case .failed(let code):
                warnFailure(
                    "disk read failed",
                    metadata: ["disk.path": "\(file)", "error.message": "\(DiskFiles.describe(code))"]
                )
                state.withLock { $0.statistics.errors += 1 }
                return nil
            case .bytes(let bytes):
                guard let entry = Self.decode(bytes, key: key) else {
                    warnFailure("corrupt entry file deleted", metadata: ["disk.path": "\(file)"])
                    discard(digest, reason: .corrupt)
                    return nil
                }
                if CachetClock.isExpired(entry.expiry, now: now) {
                    discard(digest, reason: nil)
                    state.withLock { $0.statistics.expired += 1 }
                    return nil
                }
                state.withLock { state in
                    state.index.touch(digest)
                    state.statistics.hits += 1
                }
                return entry
            }
        }
    }

    /// Reads a key's file while the index is being rebuilt and the key is not in it yet; indexes it on
    /// success. Called with the I/O lock held.
    private func readUnindexed(key: [UInt8], digest: KeyDigest, now: UInt32, maximumValueLength: Int)
        -> CachetDiskEntry?
    {
        guard !state.withLock({ $0.staleClear || $0.staleFiles.contains(digest) }) else { return nil }
        let file = path(for: digest).file
        if maximumValueLength < BlockEntryFormat.maximumValueLength,
            let prefix = DiskFiles.readPrefix(file, count: DiskEntryFormat.largestPrefixSize(keyLength: key.count)),
            let header = prefix.bytes.withUnsafeBytes({ DiskEntryFormat.decodeHeader($0) }),
            header.valueLength > maximumValueLength
        {
            // Indexed once read whole or by range; reported here without reading it.
            var entry = CachetDiskEntry(value: [], expiry: header.expiry)
            entry.oversizedLength = header.valueLength
            return entry
        }
        guard case .bytes(let bytes) = DiskFiles.read(file) else { return nil }
        guard let entry = Self.decode(bytes, key: key) else {
            warnFailure("corrupt entry file deleted", metadata: ["disk.path": "\(file)"])
            discard(digest, reason: .corrupt)
            return nil
        }
        if CachetClock.isExpired(entry.expiry, now: now) {
            unlink(file)
            state.withLock { $0.statistics.expired += 1 }
            return nil
        }
        state.withLock { state in
            state.index.upsert(
                digest,
                fileSize: bytes.count,
                logicalSize: key.count + entry.value.count,
                expiry: entry.expiry
            )
            state.statistics.hits += 1
        }
        return entry
    }

    /// Decodes a whole file and checks that it holds `key`.
    static func decode(_ bytes: [UInt8], key: [UInt8]) -> CachetDiskEntry? {
        bytes.withUnsafeBytes { raw -> CachetDiskEntry? in
            guard let header = DiskEntryFormat.decodeHeader(raw), header.fileSize == raw.count,
                header.keyLength == key.count,
                key.withUnsafeBytes({
                    memcmp($0.baseAddress!, raw.baseAddress! + header.keyStart, key.count) == 0
                })
            else { return nil }
            if header.isBlocked {
                return BlockEntryFormat.decodeValue(raw, header: header).map {
                    CachetDiskEntry(value: $0, expiry: header.expiry)
                }
            }
            let payloadStart = header.payloadStart
            guard
                let value = DiskEntryFormat.decodeValue(
                    header: header,
                    payload: UnsafeRawBufferPointer(rebasing: raw[payloadStart...])
                )
            else {
                return nil
            }
            var entry = CachetDiskEntry(value: value, expiry: header.expiry)
            entry.fields = header.fields
            return entry
        }
    }

    /// Whether the index lists a live entry for `key`. No I/O; never waits for a disk operation.
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the current time.
    /// - Returns: true when an unexpired entry is indexed (its file is checked only when read), or while
    ///   the index is being rebuilt and the key is not in it yet.
    public func contains(key: UnsafeRawBufferPointer, now: UInt32) -> Bool {
        contains(digest: KeyDigest(of: key), now: now)
    }

    /// ``contains(key:now:)`` for a key whose digest is computed already.
    func contains(digest: KeyDigest, now: UInt32) -> Bool {
        state.withLock { state in
            // While the index is rebuilt, an unindexed key may still have a file.
            guard let node = state.index.lookup(digest) else {
                return state.recovering && !state.staleClear && !state.staleFiles.contains(digest)
            }
            return !CachetClock.isExpired(node.expiry, now: now)
        }
    }

    /// Deletes expired entries among the next `budget` index entries, continuing where the last sweep
    /// stopped, so that calls from a timer cover the whole index a little at a time. Expired entries are
    /// misses anyway; the sweep frees their disk space before the LRU order reaches them.
    /// - Parameters:
    ///   - now: the current time.
    ///   - budget: index entries to examine.
    /// - Returns: entries deleted.
    /// - Complexity: O(budget) plus one `unlink` per expired entry.
    @discardableResult
    public func sweepExpired(now: UInt32, budget: Int) -> Int {
        io.withLock { _ in
            let victims = state.withLock { state -> [KeyDigest] in
                state.closed ? [] : state.index.expiredDigests(now: now, budget: budget)
            }
            for digest in victims {
                announceRemoval(of: path(for: digest).file, .expired)
                discard(digest, reason: nil)
            }
            if !victims.isEmpty { state.withLock { $0.statistics.expired += victims.count } }
            return victims.count
        }
    }
}
