/// How a disk tier is placed and sized.
public struct CachetDiskConfiguration: Sendable {
    /// The data directory; created if missing. One node per directory (a lock file enforces it).
    public var directory: String
    /// Bytes the entry files may take on disk, headers included. 0 turns the tier off. The journal's files
    /// (``journalBytes``) come on top: the node's `--disk-limit` is both, and it gives the entries what the
    /// journal leaves.
    public var limit: Int
    /// zlib level, 0 (store) to 9. The default, 1, compresses text nearly as well as 6 at several times
    /// the speed (Protocol/DISK-FORMAT.md has the measurements).
    public var compressionLevel: Int32
    /// Writes that may wait in the disk queue before a PUT has to wait for room.
    public var queueCapacity: Int
    /// Bytes of keys and values that the writes waiting in the disk queue may hold before a PUT has to wait
    /// for room; a write larger than this is queued alone. Each queued write keeps its own copy of the
    /// value until the queue has written it, so this, not ``queueCapacity``, bounds the memory the queue
    /// holds when values are large.
    public var queueByteCapacity: Int = CachetDiskConfiguration.defaultQueueByteCapacity

    /// The default bound of the bytes queued for the disk: 16 MiB.
    public static let defaultQueueByteCapacity = 16 << 20

    /// Records each of the two journal files holds (44 bytes each; the files are created at full size).
    /// The journal lists the keys written or deleted and not yet applied to the files, and those whose
    /// stale files could not be deleted; when it is full of the latter, writes are refused.
    public var journalCapacity: Int = CachetDiskConfiguration.defaultJournalCapacity

    /// The default journal size: 65,536 records, 2.9 MB per file; a tier of 64 MiB or more gets it
    /// (``sized(footprint:directory:standInLog:)``).
    public static let defaultJournalCapacity = 65_536

    /// The smallest journal a tier is given: 4,096 records (180 KB per file), four times the default queue
    /// capacity, so that the writes and deletes waiting for the disk seldom wait for the journal.
    public static let minimumJournalCapacity = 4_096

    /// Bytes a cluster member's stand-in log file may take (`CachetStandInLogFile`'s budget), part of the
    /// tier's footprint on a member (``footprint(clusterMember:)``); 4 MiB unless
    /// ``sized(footprint:directory:standInLog:)`` gave it less.
    public var standInLogBytes: Int = CachetStandInLogFile.defaultMaximumFileBytes

    /// The least budget ``sized(footprint:directory:standInLog:)`` gives a member's stand-in log: 256 KiB.
    public static let minimumStandInLogBytes = 256 << 10

    /// The tier's whole footprint on disk: the entry files, the journal's files, and on a cluster member the
    /// stand-in log's budget.
    /// - Parameter clusterMember: whether the node is a cluster member, which keeps a stand-in log here.
    public func footprint(clusterMember: Bool) -> Int {
        limit + journalBytes + (clusterMember ? standInLogBytes : 0)
    }

    /// A tier whose whole footprint is `footprint` bytes (the node's `--disk-limit`): the journal takes
    /// about a twelfth of it (a record per KiB, between ``minimumJournalCapacity`` and
    /// ``defaultJournalCapacity`` records, which a tier of 64 MiB or more gets), a
    /// cluster member's stand-in log about an eighth (between 256 KiB and its 4 MiB default), and the entry
    /// files what they leave; nil when that leaves them less than ``minimumEntryBytes``.
    /// - Parameters:
    ///   - footprint: the bytes the tier may take in all.
    ///   - directory: the data directory.
    ///   - standInLog: whether the node is a cluster member, which keeps a stand-in log there.
    /// - Returns: the configuration, or nil when `footprint` is too small (``minimumFootprint(standInLog:)``).
    public static func sized(footprint: Int, directory: String, standInLog: Bool) -> CachetDiskConfiguration? {
        var disk = CachetDiskConfiguration(directory: directory, limit: 0)
        // A record per KiB of footprint: the journal's two files take about a twelfth of it.
        disk.journalCapacity = min(defaultJournalCapacity, max(minimumJournalCapacity, footprint / 1024))
        disk.standInLogBytes = min(
            CachetStandInLogFile.defaultMaximumFileBytes,
            max(minimumStandInLogBytes, footprint / 8)
        )
        let entries = footprint - disk.journalBytes - (standInLog ? disk.standInLogBytes : 0)
        guard entries >= minimumEntryBytes else { return nil }
        disk.limit = entries
        return disk
    }

    /// The smallest footprint ``sized(footprint:directory:standInLog:)`` accepts.
    public static func minimumFootprint(standInLog: Bool) -> Int {
        var disk = CachetDiskConfiguration(directory: "", limit: 0)
        disk.journalCapacity = minimumJournalCapacity
        return disk.journalBytes + (standInLog ? minimumStandInLogBytes : 0) + minimumEntryBytes
    }

    /// Bytes the two journal files take on disk: they are created at full size when the tier opens.
    public var journalBytes: Int { 2 * (DiskJournal.headerSize + journalCapacity * DiskJournal.recordSize) }

    /// The least room for entry files a tier is given when its whole footprint is bounded: 16 KiB.
    public static let minimumEntryBytes = 16 << 10

    /// Nanoseconds between two warnings about failed reads, writes or deletes and corrupt files; the ones
    /// in between are counted in `statistics.errors` and `corrupt` only. One second unless a test says otherwise.
    package var failureWarningInterval: UInt64 = 1_000_000_000

    /// The default zlib level.
    public static let defaultCompressionLevel: Int32 = 1

    /// Creates a configuration.
    /// - Parameters:
    ///   - directory: the data directory.
    ///   - limit: bytes on disk.
    ///   - compressionLevel: zlib level 0 to 9.
    ///   - queueCapacity: pending writes before PUTs wait.
    public init(
        directory: String,
        limit: Int,
        compressionLevel: Int32 = CachetDiskConfiguration.defaultCompressionLevel,
        queueCapacity: Int = 1024
    ) {
        self.directory = directory
        self.limit = limit
        self.compressionLevel = compressionLevel
        self.queueCapacity = queueCapacity
    }
}

/// What deleting every entry did.
public struct CachetDiskClearResult: Sendable {
    /// Entries deleted.
    public var items: Int
    /// Their key and value bytes.
    public var bytes: Int
    /// Set when some file could not be deleted and the journal could not record that: the CLEAR could be
    /// undone by a restart and must not be acknowledged.
    public var failure: CachetStoreError?

    /// Creates a result.
    /// - Parameters:
    ///   - items: entries deleted.
    ///   - bytes: their bytes.
    ///   - failure: why the CLEAR must not be acknowledged, if it must not.
    public init(items: Int, bytes: Int, failure: CachetStoreError? = nil) {
        self.items = items
        self.bytes = bytes
        self.failure = failure
    }
}

/// A value read back from disk.
public struct CachetDiskEntry: Sendable, Equatable {
    /// The value's bytes, decompressed and checked.
    public var value: [UInt8]
    /// Absolute expiry in Unix seconds, 0 for never.
    public var expiry: UInt32
    /// For a read through ``CachetDiskWorker/get(key:now:completion:)``: the worker's write sequence when
    /// the read was queued, for ``CachetDiskWorker/mayKeepPromotion(key:of:)``. Not part of equality.
    public var readTicket: UInt64 = 0
    /// The value's length when the reader asked for values no longer than it is shorter
    /// (``CachetDiskStore/get(key:now:maximumValueLength:)``): the value was not read and is empty. 0
    /// otherwise. Not part of equality.
    public var oversizedLength = 0
    /// The item fields kept with the value (``CachetItemFields``), if any. Not part of equality.
    public var fields: CachetItemFields?

    /// Entries are equal when their values and expiries are.
    public static func == (lhs: CachetDiskEntry, rhs: CachetDiskEntry) -> Bool {
        lhs.value == rhs.value && lhs.expiry == rhs.expiry
    }

    /// Creates an entry.
    /// - Parameters:
    ///   - value: the value.
    ///   - expiry: absolute expiry, 0 for never.
    public init(value: [UInt8], expiry: UInt32) {
        self.value = value
        self.expiry = expiry
    }
}

/// Counters of the disk tier.
public struct CachetDiskStatistics: Sendable, Equatable {
    /// Entries on disk.
    public var items = 0
    /// Bytes of their files.
    public var bytes = 0
    /// Bytes of their keys and values, uncompressed.
    public var logicalBytes = 0
    /// The byte limit.
    public var limit = 0
    /// Reads that returned a value.
    public var hits = 0
    /// Reads, writes and deletes that failed (full disk, permissions, I/O errors), and writes of entries
    /// the file format cannot hold.
    public var errors = 0
    /// Files that failed their checks and were deleted.
    public var corrupt = 0
    /// Entries deleted to stay within the limit.
    public var evictions = 0
    /// Entries deleted because they had expired (found by a read, a sweep or the start-up scan).
    public var expired = 0
    /// Entries written compressed.
    public var compressedWrites = 0
    /// Entries written raw because compression did not save enough.
    public var rawWrites = 0
    /// Seconds the last start-up took to build the index.
    public var startupSeconds = 0.0
    /// Whether the index came from the index file of a clean shutdown (true) or a scan of the files.
    public var indexLoadedFromFile = false
    /// Whether the directory accepts writes.
    public var writable = true
    /// Whether the index is still being rebuilt from the files after a crash.
    public var recovering = false
    /// Keys whose entry files may be stale and could not be deleted (never read; kept in the journal).
    public var staleFiles = 0
    /// Records in the active journal file.
    public var journalRecords = 0
    /// Journal checkpoints since the tier opened (one at start-up).
    public var journalCheckpoints = 0
    /// Writes, deletes and clears refused because the journal could not record them.
    public var refused = 0

    /// Logical bytes per byte on disk (1 when empty).
    public var compressionRatio: Double { bytes > 0 ? Double(logicalBytes) / Double(bytes) : 1 }
}
