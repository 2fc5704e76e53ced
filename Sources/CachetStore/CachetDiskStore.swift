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
    let state: LockedBox<State>
    let io = LockedBox(())
    private let lockFD: Int32

    struct State {
        var index = DiskIndex()
        var statistics = CachetDiskStatistics()
        var closed = false
        /// The index is incomplete: a recovery scan has to run or is running.
        var recovering = false
        var recoveryStarted = false
        var cancelRecovery = false
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

        var index = DiskIndex()
        var loaded = Self.loadIndexFile(directory: directory, into: &index)
        if loaded && !Self.sampleMatches(index, directory: directory) {
            logger.warning("the index file does not match the entry files; rebuilding the index from the files")
            index = DiskIndex()
            loaded = false
        }
        statistics.indexLoadedFromFile = loaded
        // Without an index file there is something to rebuild only if fan-out directories exist.
        let hasEntryDirectories = DiskFiles.list(directory).contains { $0.utf8.count == 2 }
        state = LockedBox(State(index: index, statistics: statistics, recovering: !loaded && hasEntryDirectories))
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

    private func path(for digest: KeyDigest) -> (directory: String, file: String) {
        let hex = digest.hex
        let first = hex.prefix(2)
        let second = hex.dropFirst(2).prefix(2)
        let directory = "\(configuration.directory)/\(first)/\(second)"
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
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
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
                if !state.withLock({ $0.closed }) { discard(digest, reason: nil) }
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
                discard(digest, reason: nil)
                return
            }
            guard file.count <= configuration.limit else {
                // Larger than the whole tier: it cannot be kept, and an older copy must not stay.
                discard(digest, reason: nil)
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
                discard(digest, reason: nil)
                state.withLock { $0.statistics.errors += 1 }
                return
            }
            state.withLock { state in
                state.index.upsert(digest, fileSize: file.count, logicalSize: key.count + value.count, expiry: expiry)
                if compressed { state.statistics.compressedWrites += 1 } else { state.statistics.rawWrites += 1 }
            }
        }
        trimToLimit()
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
        let digest = KeyDigest(of: key)
        return state.withLock { state in
            // While the index is rebuilt, an unindexed key may still have a file.
            guard let node = state.index.lookup(digest) else { return state.recovering }
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
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        return io.withLock { _ in
            let (present, recovering, closed) = state.withLock {
                ($0.index.lookup(digest) != nil, $0.recovering, $0.closed)
            }
            guard !closed else { return false }
            discard(digest, reason: nil)
            if recovering && !present {
                // Not indexed yet: the file may still be there.
                return unlink(path(for: digest).file) == 0
            }
            return present
        }
    }

    /// Deletes every entry.
    /// - Returns: entries deleted and their key and value bytes.
    @discardableResult
    public func removeAll() -> (items: Int, bytes: Int) {
        io.withLock { _ in
            guard !state.withLock({ $0.closed }) else { return (0, 0) }
            let nodes = state.withLock { state -> [DiskIndex.Node] in
                let nodes = state.index.inRecencyOrder()
                state.index.removeAll()
                return nodes
            }
            var bytes = 0
            var items = nodes.count
            if state.withLock({ $0.recovering }) {
                // Files not indexed yet are entries too: delete them, counting what their headers say.
                let indexed = Set(nodes.map(\.digest))
                Self.forEachEntryFile(directory: configuration.directory) { path, name in
                    if case .entry(let digest, _, let logicalSize, _, _) = Self.scanFile(path, name: name),
                        !indexed.contains(digest)
                    {
                        items += 1
                        bytes += logicalSize
                    }
                    unlink(path)
                    return true
                }
            }
            for node in nodes {
                bytes += node.logicalSize
                let file = path(for: node.digest).file
                if unlink(file) != 0 && errno != ENOENT {
                    warnFailure(
                        "cannot delete entry file",
                        metadata: ["disk.path": "\(file)", "error.message": "\(DiskFiles.describe(errno))"]
                    )
                    state.withLock { $0.statistics.errors += 1 }
                }
            }
            return (items, bytes)
        }
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
        state.withLock { state in
            var statistics = state.statistics
            statistics.items = state.index.count
            statistics.bytes = state.index.fileBytes
            statistics.logicalBytes = state.index.logicalBytes
            statistics.recovering = state.recovering
            return statistics
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
            if lockFD >= 0 {
                flock(lockFD, LOCK_UN)
                Glibc.close(lockFD)
            }
        }
    }
}
