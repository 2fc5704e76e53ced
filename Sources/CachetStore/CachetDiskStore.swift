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
    /// Told of the entries the tier drops on its own (``observeRemovals(when:_:)``).
    let removalObserver = CachetLock<CachetDiskRemovalObserver?>(nil)

    /// Has `observer` told of each entry the tier evicts or finds expired, with its key, while `wanted`
    /// says so: the key is read from the entry file's header before it is deleted, a small read each, on
    /// the disk queue. Set once, before use.
    /// - Parameters:
    ///   - wanted: whether anyone listens now (asked before each read).
    ///   - observer: the key and why.
    public func observeRemovals(
        when wanted: @escaping @Sendable () -> Bool,
        _ observer: @escaping @Sendable ([UInt8], CachetRemovalReason) -> Void
    ) {
        removalObserver.withLock { $0 = CachetDiskRemovalObserver(wanted: wanted, observer: observer) }
    }

    /// Tells the observer of an entry about to be dropped, when it listens.
    func announceRemoval(of file: String, _ reason: CachetRemovalReason) {
        guard let observer = removalObserver.withLock({ $0 }), observer.wanted(),
            let (key, _) = Self.readKey(file)
        else { return }
        observer.observer(key, reason)
    }

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
        let leftovers = Self.removeLeftoverUploads(in: directory)
        if leftovers > 0 {
            logger.notice(
                "deleted the parts of uploads that did not finish",
                metadata: ["disk.uploads": "\(leftovers)"]
            )
        }
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
    /// one file header and its record in the index file. A bigger entry may still fit if it compresses, but
    /// a caller that promises to keep an entry on disk only should check it against this.
    public var maximumEntryBytes: Int {
        // Values shorter than blocks take a header of version 1; longer ones a header of version 2 and a table.
        let single = configuration.limit - DiskEntryFormat.headerSize - Self.indexRecordSize
        let table = BlockEntryFormat.tableSize(blockCount: configuration.limit / BlockEntryFormat.blockSize + 1)
        let blocked = configuration.limit - DiskEntryFormat.largestHeaderSize - table - Self.indexRecordSize
        return max(0, min(single, BlockEntryFormat.threshold - 1), blocked)
    }

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

/// What ``CachetDiskStore/observeRemovals(when:_:)`` keeps.
struct CachetDiskRemovalObserver: Sendable {
    let wanted: @Sendable () -> Bool
    let observer: @Sendable ([UInt8], CachetRemovalReason) -> Void
}
