import CachetLocking
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Writes, deletes, clearing and the byte limit: the operations that change files and the index.
extension CachetDiskStore {
    /// Writes an entry, replacing any older one, then evicts least recently used entries over the limit.
    /// Failures are logged and counted; an older file for the key is removed so it cannot be served stale.
    /// A key outside 1 to 4096 bytes or a value over 4 GiB cannot be written: it is counted as an error.
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    ///   - expiry: absolute expiry in Unix seconds, 0 for never.
    ///   - fields: the item fields to keep with it, if any.
    public func put(key: [UInt8], value: [UInt8], expiry: UInt32, fields: CachetItemFields? = nil) {
        put(key: key, digest: key.withUnsafeBytes { KeyDigest(of: $0) }, value: value, expiry: expiry, fields: fields)
    }

    func put(key: [UInt8], digest: KeyDigest, value: [UInt8], expiry: UInt32, fields: CachetItemFields? = nil) {
        guard DiskEntryFormat.canHold(keyLength: key.count, valueLength: value.count) else {
            // Not representable in an entry file; an older copy must not stay either.
            warnFailure(
                """
                entry not written to disk: keys must be 1 to \(DiskEntryFormat.maximumKeyLength) bytes \
                and values at most \(BlockEntryFormat.maximumValueLength) bytes
                """,
                metadata: ["disk.key_length": "\(key.count)", "disk.value_length": "\(value.count)"]
            )
            io.withLock { _ in
                if !state.withLock({ $0.closed }) { invalidate(digest) }
            }
            state.withLock { $0.statistics.errors += 1 }
            return
        }
        let (file, compressed) = DiskEntryFormat.encode(
            key: key,
            value: value,
            expiry: expiry,
            fields: fields,
            level: configuration.compressionLevel
        )
        io.withLock { _ in
            let (writable, closed) = state.withLock { state in
                if !state.statistics.writable || state.closed { state.statistics.errors += 1 }
                return (state.statistics.writable, state.closed)
            }
            // Once closed, the directory may belong to another node: leave its files alone.
            guard !closed else { return }
            guard writable else {
                invalidate(digest)
                return
            }
            guard file.count + Self.indexRecordSize <= configuration.limit else {
                // Larger than the whole tier (with its record in the index file): it cannot be kept, and an
                // older copy must not stay.
                invalidate(digest)
                return
            }
            let paths = path(for: digest)
            var failure = DiskFiles.replace(paths.file, with: file, temporary: paths.file + ".tmp")
            if failure == ENOENT {
                DiskFiles.makeDirectory(paths.directory)
                failure = DiskFiles.replace(paths.file, with: file, temporary: paths.file + ".tmp")
            }
            if let failure {
                warnFailure(
                    "disk write failed; the entry stays in memory only",
                    metadata: ["disk.path": "\(paths.file)", "error.message": "\(DiskFiles.describe(failure))"]
                )
                invalidate(digest)
                state.withLock { $0.statistics.errors += 1 }
                return
            }
            state.withLock { state in
                state.index.upsert(digest, fileSize: file.count, logicalSize: key.count + value.count, expiry: expiry)
                state.staleFiles.remove(digest)
                if compressed { state.statistics.compressedWrites += 1 } else { state.statistics.rawWrites += 1 }
            }
        }
        trimToLimit()
    }

    /// Drops a key's index entry and deletes its file, indexed or not. A file that cannot be deleted
    /// (a directory turned read-only) may hold an older value than the last acknowledged one: it is
    /// remembered, never read, and kept in the journal until a later write or delete of the key succeeds.
    /// Called with the I/O lock held. Returns whether an entry was indexed.
    /// - Parameter countFailure: count a failed delete in `errors` and warn (a failed write that calls
    ///   this has been counted already).
    @discardableResult
    func invalidate(_ digest: KeyDigest, countFailure: Bool = false) -> Bool {
        let present = state.withLock { $0.index.remove(digest) != nil }
        let file = path(for: digest).file
        if DiskFiles.remove(file) {
            state.withLock { _ = $0.staleFiles.remove(digest) }
            return present
        }
        if countFailure {
            warnFailure(
                "cannot delete an entry file; it will not be read",
                metadata: ["disk.path": "\(file)", "error.message": "\(DiskFiles.describe(errno))"]
            )
        }
        state.withLock { state in
            if countFailure { state.statistics.errors += 1 }
            state.staleFiles.insert(digest)
        }
        journal?.recordSurvivor(digest, survivors: survivors)
        return present
    }

    /// The keys whose files could not be deleted, and whether a CLEAR failed: what a journal checkpoint
    /// must keep.
    func survivors() -> (digests: Set<KeyDigest>, clear: Bool) {
        state.withLock { ($0.staleFiles, $0.staleClear) }
    }

    /// Deletes an entry.
    /// - Parameter key: the key.
    /// - Returns: whether an entry was indexed.
    @discardableResult
    public func remove(key: [UInt8]) -> Bool {
        remove(digest: key.withUnsafeBytes { KeyDigest(of: $0) })
    }

    @discardableResult
    func remove(digest: KeyDigest) -> Bool {
        io.withLock { _ in
            let (present, recovering, closed) = state.withLock {
                ($0.index.lookup(digest) != nil, $0.recovering, $0.closed)
            }
            guard !closed else { return false }
            // Indexed or not (being rebuilt, or an eviction that could not delete it), the file must go.
            let existed = recovering && !present && access(path(for: digest).file, F_OK) == 0
            return invalidate(digest, countFailure: true) || existed
        }
    }

    /// Deletes every entry.
    /// - Returns: entries deleted and their key and value bytes.
    @discardableResult
    public func removeAll() -> (items: Int, bytes: Int) {
        let result = clear()
        return (result.items, result.bytes)
    }

    /// Deletes every entry, saying whether the deletion can be undone by a restart: when some file could
    /// not be deleted and the journal cannot record that, `failure` says so and the CLEAR must not be
    /// acknowledged.
    func clear() -> CachetDiskClearResult {
        let (result, failed) = io.withLock { _ -> (CachetDiskClearResult, Bool) in
            guard !state.withLock({ $0.closed }) else { return (CachetDiskClearResult(items: 0, bytes: 0), false) }
            let (nodes, recovering, staleClear, staleFiles) = state.withLock { state in
                let nodes = state.index.inRecencyOrder()
                state.index.removeAll()
                return (nodes, state.recovering, state.staleClear, state.staleFiles)
            }
            var bytes = 0
            var items = nodes.count
            var failed = false
            if recovering || staleClear {
                // Files not indexed yet are entries too (counted by what their headers say); after a CLEAR
                // that failed, they are what it left behind.
                let indexed = Set(nodes.map(\.digest))
                Self.forEachEntryFile(directory: configuration.directory) { path, name in
                    if recovering, case .entry(let digest, _, let logicalSize, _, _) = Self.scanFile(path, name: name),
                        !indexed.contains(digest)
                    {
                        items += 1
                        bytes += logicalSize
                    }
                    if !DiskFiles.remove(path) { failed = true }
                    return true
                }
            }
            var deletedStale: [KeyDigest] = []
            for digest in staleFiles where DiskFiles.remove(path(for: digest).file) { deletedStale.append(digest) }
            for node in nodes {
                bytes += node.logicalSize
                let file = path(for: node.digest).file
                if !DiskFiles.remove(file) {
                    warnFailure(
                        "cannot delete entry file",
                        metadata: ["disk.path": "\(file)", "error.message": "\(DiskFiles.describe(errno))"]
                    )
                    state.withLock { $0.statistics.errors += 1 }
                    failed = true
                }
            }
            state.withLock { state in
                for digest in deletedStale { state.staleFiles.remove(digest) }
                state.staleClear = failed
            }
            return (CachetDiskClearResult(items: items, bytes: bytes), failed)
        }
        guard failed else { return result }
        var answer = result
        if journal?.recordSurvivor(nil, survivors: survivors) != true {
            answer.failure = CachetStoreError(
                code: .writeRefused,
                message:
                    "CLEAR could not delete every entry file in \(configuration.directory) and the disk journal cannot "
                    + "record it, so entries could come back after a restart; make the data directory writable"
            )
        }
        return answer
    }

    /// Deletes the entries whose keys start with one of `prefixes` (a CLEAR limited to prefixes). The index
    /// names entries by digest only, so this reads the key from each entry file's header: one small read
    /// per entry on disk, on the disk queue. A file that cannot be deleted is never read again and is
    /// recorded as such in the journal, as for DEL.
    /// - Parameter prefixes: the key prefixes; an empty list deletes nothing.
    /// - Returns: the entries deleted and their key and value bytes.
    func clear(prefixes: [[UInt8]]) -> CachetDiskClearResult {
        io.withLock { _ -> CachetDiskClearResult in
            var result = CachetDiskClearResult(items: 0, bytes: 0)
            guard !prefixes.isEmpty else { return result }
            let (closed, recovering, nodes) = state.withLock { state in
                (state.closed, state.recovering, state.recovering ? [] : state.index.inRecencyOrder())
            }
            guard !closed else { return result }
            func removeIfMatching(_ path: String) {
                guard let (key, logicalSize) = Self.readKey(path),
                    prefixes.contains(where: { key.starts(with: $0) })
                else { return }
                let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
                let indexed = invalidate(digest, countFailure: true)
                if indexed || recovering {
                    result.items += 1
                    result.bytes += logicalSize
                }
            }
            if recovering {
                // Entries not indexed yet are on disk all the same: every file is read.
                Self.forEachEntryFile(directory: configuration.directory) { path, _ in
                    removeIfMatching(path)
                    return true
                }
            } else {
                for node in nodes { removeIfMatching(path(for: node.digest).file) }
            }
            return result
        }
    }

    /// The key of an entry file and its key and value bytes, or nil for a file that is gone or not a valid
    /// entry.
    static func readKey(_ path: String) -> (key: [UInt8], logicalSize: Int)? {
        guard
            let prefix = DiskFiles.readPrefix(
                path,
                count: DiskEntryFormat.largestPrefixSize(keyLength: DiskEntryFormat.maximumKeyLength)
            )
        else { return nil }
        return prefix.bytes.withUnsafeBytes { raw in
            guard let header = DiskEntryFormat.decodeHeader(raw) else { return nil }
            let key = Array(raw[header.keyStart..<(header.keyStart + header.keyLength)])
            return (key, header.keyLength + header.valueLength)
        }
    }

    /// Removes an entry's index record and file. Called with the I/O lock held.
    func discard(_ digest: KeyDigest, reason: CachetStoreError.Code?) {
        let removed = state.withLock { state -> Bool in
            if reason == .corrupt { state.statistics.corrupt += 1 }
            return state.index.remove(digest) != nil
        }
        let file = path(for: digest).file
        if (removed || reason == .corrupt) && unlink(file) != 0 && errno != ENOENT {
            state.withLock { $0.statistics.errors += 1 }
        }
    }

    /// Deletes least recently used entries while the files, with the index file a clean shutdown would write
    /// for them (``indexRecordSize`` bytes each), exceed the limit. Waits for a complete index: while it is
    /// rebuilt, the LRU order is not known yet.
    func trimToLimit() {
        io.withLock { _ in
            while true {
                let victim = state.withLock { state -> KeyDigest? in
                    let footprint = state.index.fileBytes + state.index.count * Self.indexRecordSize
                    guard !state.recovering, !state.closed, footprint > configuration.limit,
                        let oldest = state.index.oldest
                    else {
                        return nil
                    }
                    state.index.remove(oldest.digest)
                    state.statistics.evictions += 1
                    return oldest.digest
                }
                guard let victim else { return }
                let file = path(for: victim).file
                announceRemoval(of: file, .evicted)
                if unlink(file) != 0 && errno != ENOENT {
                    state.withLock { $0.statistics.errors += 1 }
                }
            }
        }
    }

    /// The tier's counters.
    public var statistics: CachetDiskStatistics {
        var result = state.withLock { state in
            var statistics = state.statistics
            statistics.items = state.index.count
            statistics.bytes = state.index.fileBytes
            statistics.logicalBytes = state.index.logicalBytes
            statistics.recovering = state.recovering
            statistics.staleFiles = state.staleFiles.count
            return statistics
        }
        if let journal {
            let usage = journal.usage
            result.journalRecords = usage.records
            result.journalCheckpoints = usage.checkpoints
        }
        return result
    }

    /// Journals an operation on `digest` (nil: CLEAR) before it is queued and acknowledged.
    ///
    /// Without a journal, operations are refused while entry files could be served (they could go stale
    /// without a record); a tier that holds nothing and cannot write anything has nothing to protect.
    func admit(_ digest: KeyDigest?) -> DiskJournal.Admission {
        guard let journal else {
            let harmless = state.withLock { !$0.statistics.writable && $0.index.count == 0 && !$0.recovering }
            if harmless { return .recorded }
            state.withLock { $0.statistics.refused += 1 }
            return .refused(
                "the disk journal in \(configuration.directory) cannot be opened "
                    + "(\(DiskFiles.describe(journalFailure ?? EBADF))); make the data directory writable and restart"
            )
        }
        let admission = journal.record(digest, survivors: survivors)
        if case .refused = admission { state.withLock { $0.statistics.refused += 1 } }
        return admission
    }

    /// Marks a journaled operation as applied to the files, and checkpoints the journal when it is due.
    func applied(_ digest: KeyDigest?) {
        guard let journal else { return }
        journal.applied(digest)
        journal.checkpointIfDue(survivors: survivors)
    }

    /// Checkpoints the journal if anything was journaled since the last checkpoint: called on the disk
    /// queue once it has been idle for ``CachetDiskWorker/settleDelay``, so that after a crash every entry
    /// applied before that quiet moment is served again (`Protocol/DISK-FORMAT.md`, "Checkpoints").
    public func settle() {
        journal?.checkpointIfDue(settling: true, survivors: survivors)
    }
}
