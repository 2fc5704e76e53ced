import CachetLocking
import Dispatch
public import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The disk tier: one zlib-compressed file per entry, named by the SHA-256 of its key, with an in-memory
/// LRU index and a byte limit. The file format is in `Protocol/DISK-FORMAT.md`.
///
/// Opening takes the directory's lock file and loads the index file a clean shutdown wrote. Without one
/// (after a crash), ``startRecovery()`` rebuilds the index in the background by reading every file's
/// header, deleting temporary, corrupt and expired files; meanwhile a read of a key not yet indexed checks
/// its file directly, so the tier serves at once. The limit is enforced once the index is complete. Every read checks the header CRC, the key, the length and the value's CRC; a file that fails
/// is deleted and counted, never served. Writes go to a temporary file renamed into place, so a crash
/// leaves the old entry or the new one. There is no fsync per entry: after a power loss an entry may be
/// missing or fail its checks (and then is a miss), but it is never served wrong.
///
/// Failures (full disk, permissions) are logged and counted, and the tier keeps going: a node serves
/// from memory whatever its disk does.
///
/// Thread-safe: file operations are serialised by one lock and the index by another, so ``contains(key:now:)``
/// never waits for disk I/O. ``CachetDiskWorker`` runs the file operations on a dedicated queue.
public final class CachetDiskStore: Sendable {
    /// The configuration the tier was opened with.
    public let configuration: CachetDiskConfiguration
    let logger: Logger
    let state: CachetLock<State>
    /// Serialises file operations. It guards no value: the Int is unused, and not `()` because
    /// ThreadSanitizer reports the exclusive access to a zero-sized value at the box's own address, where
    /// unlocked reads of its header look like a race.
    let io = CachetLock(0)
    private let lockFD: Int32
    /// The invalidation journal; nil when it cannot be opened (see ``admit(_:)``).
    let journal: DiskJournal?
    /// Why the journal could not be opened.
    let journalFailure: Int32?

    struct State {
        var index = DiskIndex()
        var statistics = CachetDiskStatistics()
        var closed = false
        /// The index is incomplete: a recovery scan has to run or is running.
        var recovering = false
        var recoveryStarted = false
        var cancelRecovery = false
        /// Keys whose entry file may be older than the last acknowledged operation and could not be
        /// deleted (a directory turned read-only): never read, and kept in the journal until deleted.
        var staleFiles = Set<KeyDigest>()
        /// A CLEAR could not delete every file: no file outside the index may be read, and the journal
        /// keeps a CLEAR record until one succeeds.
        var staleClear = false
        /// When the last failure warning was logged (uptime nanoseconds), and how many were held back since.
        var lastFailureWarning: UInt64?
        var heldBackFailureWarnings = 0
    }
    let recoveryDone = DispatchGroup()

    private static let indexFileName = "index"
    private static let lockFileName = "LOCK"

    /// Opens (or creates) the tier in `configuration.directory`.
    /// - Parameters:
    ///   - configuration: directory, limit and compression level.
    ///   - logger: where failures are logged, with `disk.*` metadata.
    /// - Throws: ``CachetStoreError`` `directoryLocked` when another running node uses the directory.
    ///   A directory that cannot be created or written does not throw: the tier opens read-only or empty,
    ///   logs the reason, and counts errors.
    public init(configuration: CachetDiskConfiguration, logger: Logger) throws(CachetStoreError) {
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "disk.directory"] = "\(configuration.directory)"
        self.logger = logger
        let started = DispatchTime.now()
        var statistics = CachetDiskStatistics()
        statistics.limit = configuration.limit

        let directory = configuration.directory
        let directoryFailure: Int32? =
            DiskFiles.makeDirectory(directory) ? (DiskFiles.isDirectory(directory) ? nil : ENOTDIR) : errno
        if let directoryFailure {
            logger.error(
                "cannot create the data directory; the disk tier is off",
                metadata: ["error.message": "\(DiskFiles.describe(directoryFailure))"]
            )
            statistics.writable = false
            statistics.errors += 1
        }
        lockFD = try Self.acquireLock(directory: directory, logger: logger, statistics: &statistics)
        if access(directory, W_OK) != 0 {
            if statistics.writable {
                logger.error("the data directory is not writable; entries on disk are served but none are written")
            }
            statistics.writable = false
        }

        // The journal names the keys whose files may be older than what was acknowledged: delete them
        // before anything is read.
        let opened = DiskJournal.open(directory: directory, capacity: max(16, configuration.journalCapacity))
        journal = opened.journal
        journalFailure = opened.failure
        var staleFiles = Set<KeyDigest>()
        var staleClear = false
        if opened.replay.clear {
            Self.forEachEntryFile(directory: directory) { path, _ in
                if !DiskFiles.remove(path) { staleClear = true }
                return true
            }
        }
        for digest in opened.replay.digests where !DiskFiles.remove(Self.path(for: digest, in: directory).file) {
            staleFiles.insert(digest)
        }
        if opened.replay.records > 0 {
            logger.info(
                "disk journal replayed: entries written or deleted just before the last stop were dropped",
                metadata: [
                    "disk.journal_records": "\(opened.replay.records)",
                    "disk.journal_undeletable": "\(staleFiles.count + (staleClear ? 1 : 0))",
                ]
            )
        }
        if opened.journal == nil && directoryFailure == nil {
            logger.error(
                "cannot open the disk journal; PUT, DEL and CLEAR are refused while entry files could go stale",
                metadata: ["error.message": "\(DiskFiles.describe(opened.failure ?? EBADF))"]
            )
        }

        var index = DiskIndex()
        var loaded = Self.loadIndexFile(directory: directory, into: &index)
        if loaded && opened.replay.clear {
            // Every file it lists was deleted (or cannot be trusted).
            index = DiskIndex()
        }
        for digest in opened.replay.digests { index.remove(digest) }
        if loaded && !Self.sampleMatches(index, directory: directory) {
            logger.warning("the index file does not match the entry files; rebuilding the index from the files")
            index = DiskIndex()
            loaded = false
        }
        statistics.indexLoadedFromFile = loaded
        // Without an index file there is something to rebuild only if fan-out directories exist.
        // After a CLEAR that could not delete everything, no file outside the index is trusted.
        let hasEntryDirectories = !staleClear && DiskFiles.list(directory).contains { $0.utf8.count == 2 }
        state = CachetLock(
            State(
                index: index,
                statistics: statistics,
                recovering: !loaded && hasEntryDirectories,
                staleFiles: staleFiles,
                staleClear: staleClear
            )
        )
        // Only now may the replayed records go: the journal keeps just the files that could not be deleted.
        if let journal, !journal.checkpoint(survivors: survivors) {
            logger.error(
                "cannot write the disk journal; PUT, DEL and CLEAR are refused",
                metadata: ["error.message": "\(DiskFiles.describe(journal.failure ?? ENOSPC))"]
            )
        }
        // A crash from here on leaves no index file, so the next start scans the files.
        unlink(directory + "/" + Self.indexFileName)
        trimToLimit()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        let (items, bytes) = state.withLock { state in
            state.statistics.startupSeconds = seconds
            return (state.index.count, state.index.fileBytes)
        }
        logger.info(
            "disk tier open",
            metadata: [
                "disk.items": "\(items)", "disk.bytes": "\(bytes)", "disk.limit": "\(configuration.limit)",
                "disk.startup_seconds": "\(seconds)",
                "disk.index": "\(loaded ? "index file" : "rebuilt in the background")",
            ]
        )
    }

    deinit { close() }

    private static func acquireLock(directory: String, logger: Logger, statistics: inout CachetDiskStatistics)
        throws(CachetStoreError) -> Int32
    {
        let path = directory + "/" + lockFileName
        var fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        if fd < 0 { fd = open(path, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else {
            // Nothing can be written here either; there is nothing to protect.
            return -1
        }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            var owner = [UInt8](repeating: 0, count: 32)
            let n = owner.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 31, 0) }
            let pid = String(decoding: owner.prefix(max(0, n)).filter { $0 >= 0x30 && $0 <= 0x39 }, as: UTF8.self)
            Glibc.close(fd)
            throw CachetStoreError(
                code: .directoryLocked,
                message:
                    "data directory \(directory) is in use by another cachet-node (pid \(pid.isEmpty ? "unknown" : pid), "
                    + "lock file \(path)); give each node its own --data-dir"
            )
        }
        let pid = Array("\(getpid())\n".utf8)
        if ftruncate(fd, 0) == 0 {
            _ = pid.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        }
        return fd
    }

    /// The largest key plus value that always fits the tier, even when it does not compress: the limit less
    /// one file header. A bigger entry may still fit if it compresses, but a caller that promises to keep
    /// an entry on disk only should check it against this.
    public var maximumEntryBytes: Int { max(0, configuration.limit - DiskEntryFormat.headerSize) }

    // MARK: Failure warnings

    /// Logs a failure at warning level, at most once per ``CachetDiskConfiguration/failureWarningInterval``:
    /// a full disk fails every write, and a line per write would flood the log (often on that same disk).
    /// The next line logged says in `disk.warnings_held_back` how many were not.
    func warnFailure(_ message: @autoclosure () -> Logger.Message, metadata: Logger.Metadata) {
        let now = DispatchTime.now().uptimeNanoseconds
        let heldBack = state.withLock { state -> Int? in
            if let last = state.lastFailureWarning, now &- last < configuration.failureWarningInterval {
                state.heldBackFailureWarnings += 1
                return nil
            }
            state.lastFailureWarning = now
            defer { state.heldBackFailureWarnings = 0 }
            return state.heldBackFailureWarnings
        }
        guard let heldBack else { return }
        var metadata = metadata
        if heldBack > 0 { metadata["disk.warnings_held_back"] = "\(heldBack)" }
        logger.warning(message(), metadata: metadata)
    }

    // MARK: Paths

    func path(for digest: KeyDigest) -> (directory: String, file: String) {
        Self.path(for: digest, in: configuration.directory)
    }

    static func path(for digest: KeyDigest, in root: String) -> (directory: String, file: String) {
        let hex = digest.hex
        let first = hex.prefix(2)
        let second = hex.dropFirst(2).prefix(2)
        let directory = "\(root)/\(first)/\(second)"
        return (directory, "\(directory)/\(hex)")
    }

    // MARK: Operations

    /// Writes an entry, replacing any older one, then evicts least recently used entries over the limit.
    /// Failures are logged and counted; an older file for the key is removed so it cannot be served stale.
    /// A key outside 1 to 4096 bytes or a value over 4 GiB cannot be written: it is counted as an error.
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    ///   - expiry: absolute expiry in Unix seconds, 0 for never.
    public func put(key: [UInt8], value: [UInt8], expiry: UInt32) {
        put(key: key, digest: key.withUnsafeBytes { KeyDigest(of: $0) }, value: value, expiry: expiry)
    }

    func put(key: [UInt8], digest: KeyDigest, value: [UInt8], expiry: UInt32) {
        guard DiskEntryFormat.canHold(keyLength: key.count, valueLength: value.count) else {
            // Not representable in an entry file; an older copy must not stay either.
            warnFailure(
                """
                entry not written to disk: keys must be 1 to \(DiskEntryFormat.maximumKeyLength) bytes \
                and values at most \(DiskEntryFormat.maximumValueLength) bytes
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
            guard file.count <= configuration.limit else {
                // Larger than the whole tier: it cannot be kept, and an older copy must not stay.
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

    /// Reads an entry, checking everything the file carries.
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the current time; an expired entry is deleted and reads as absent.
    /// - Returns: the value and its expiry, or nil when absent, expired, unreadable or corrupt.
    public func get(key: [UInt8], now: UInt32) -> CachetDiskEntry? {
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        return io.withLock { _ -> CachetDiskEntry? in
            let (indexed, recovering, closed) = state.withLock {
                ($0.index.lookup(digest), $0.recovering, $0.closed)
            }
            // Once closed, the directory may belong to another node.
            guard !closed else { return nil }
            guard let node = indexed else {
                return recovering ? readUnindexed(key: key, digest: digest, now: now) : nil
            }
            if CachetClock.isExpired(node.expiry, now: now) {
                discard(digest, reason: nil)
                state.withLock { $0.statistics.expired += 1 }
                return nil
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
    private func readUnindexed(key: [UInt8], digest: KeyDigest, now: UInt32) -> CachetDiskEntry? {
        guard !state.withLock({ $0.staleClear || $0.staleFiles.contains(digest) }) else { return nil }
        let file = path(for: digest).file
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
                    memcmp($0.baseAddress!, raw.baseAddress! + DiskEntryFormat.headerSize, key.count) == 0
                })
            else { return nil }
            let payloadStart = DiskEntryFormat.headerSize + header.keyLength
            guard
                let value = DiskEntryFormat.decodeValue(
                    header: header,
                    payload: UnsafeRawBufferPointer(rebasing: raw[payloadStart...])
                )
            else {
                return nil
            }
            return CachetDiskEntry(value: value, expiry: header.expiry)
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
            for digest in victims { discard(digest, reason: nil) }
            if !victims.isEmpty { state.withLock { $0.statistics.expired += victims.count } }
            return victims.count
        }
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

    /// Removes an entry's index record and file. Called with the I/O lock held.
    private func discard(_ digest: KeyDigest, reason: CachetStoreError.Code?) {
        let removed = state.withLock { state -> Bool in
            if reason == .corrupt { state.statistics.corrupt += 1 }
            return state.index.remove(digest) != nil
        }
        let file = path(for: digest).file
        if (removed || reason == .corrupt) && unlink(file) != 0 && errno != ENOENT {
            state.withLock { $0.statistics.errors += 1 }
        }
    }

    /// Deletes least recently used entries while the files exceed the limit. Waits for a complete index:
    /// while it is rebuilt, the LRU order is not known yet.
    func trimToLimit() {
        io.withLock { _ in
            while true {
                let victim = state.withLock { state -> KeyDigest? in
                    guard !state.recovering, !state.closed, state.index.fileBytes > configuration.limit,
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

    /// Stops touching files and releases the lock file without writing the index file or checkpointing the
    /// journal: what `kill -9` leaves, for tests that reopen the directory in the same process.
    func abandonAsIfKilled() {
        let started = state.withLock { state -> Bool in
            state.cancelRecovery = true
            return state.recoveryStarted
        }
        if started { recoveryDone.wait() }
        io.withLock { _ in
            let wasClosed = state.withLock { state -> Bool in
                defer { state.closed = true }
                return state.closed
            }
            guard !wasClosed, lockFD >= 0 else { return }
            flock(lockFD, LOCK_UN)
            Glibc.close(lockFD)
        }
    }

    /// Writes the index file (so the next start need not scan) and releases the lock file. Idempotent;
    /// afterwards the store touches no file: reads miss, writes and deletes are refused (writes count as
    /// errors), since the directory may already belong to another node.
    public func close() {
        let started = state.withLock { state -> Bool in
            state.cancelRecovery = true
            return state.recoveryStarted
        }
        if started { recoveryDone.wait() }
        io.withLock { _ in
            let nodes = state.withLock { state -> [DiskIndex.Node]? in
                guard !state.closed else { return nil }
                state.closed = true
                // An incomplete index must not be written: the next start would trust it.
                guard !state.recovering else { return [] }
                return state.statistics.writable ? state.index.inRecencyOrder() : []
            }
            guard let nodes else { return }
            if state.withLock({ $0.statistics.writable && !$0.recovering }) {
                Self.writeIndexFile(directory: configuration.directory, nodes: nodes, logger: logger)
            }
            // Everything queued has been applied: the journal keeps only the files that could not be deleted.
            if let journal, !journal.checkpoint(survivors: survivors) {
                logger.warning("cannot checkpoint the disk journal; the next start replays all of it")
            }
            if lockFD >= 0 {
                flock(lockFD, LOCK_UN)
                Glibc.close(lockFD)
            }
        }
    }
}
