#if canImport(Glibc)
import CachetLocking
import Glibc
#endif

/// The invalidation journal: which keys' entry files may not hold what the last acknowledged operation
/// left, so that a crash or a failing disk cannot bring an older value or a deleted key back.
///
/// Every PUT and DEL the node acknowledges appends the key's digest here before its reply is sent; at
/// start-up every journaled key's file is deleted (a miss, never an older value). A checkpoint rewrites
/// the journal with only the keys still waiting for the disk queue and those whose stale file could not
/// be deleted, so it stays small. The format is in `Protocol/DISK-FORMAT.md`.
///
/// Two files, `journal-0` and `journal-1`, created at full size when the tier opens (so appends need no
/// new blocks on a full disk, and no new names in a directory turned read-only): appends go to the active
/// one; a checkpoint writes the survivors to the other, then marks the old one empty. At start-up both are
/// read, so a crash between the two steps loses nothing.
///
/// `@unchecked Sendable`: `state` is a `CachetLock`; the descriptors are fixed at creation.
final class DiskJournal: @unchecked Sendable {
    static let magic: [UInt8] = Array("CCHJ".utf8)
    static let headerSize = 16
    static let recordSize = 44
    static let fileNames = ["journal-0", "journal-1"]
    private static let keyRecord: UInt8 = 1
    private static let clearRecord: UInt8 = 2

    /// Records one file holds.
    let capacity: Int
    private let fds: [Int32]
    private let state: CachetLock<State>

    struct State {
        var active = 0
        var epoch: UInt32 = 0
        /// Records in the active file.
        var used = 0
        /// Journaled operations not applied yet, per digest; nil digest is CLEAR.
        var pending: [KeyDigest: Int] = [:]
        var pendingClears = 0
        /// The errno of a failed journal write: from then on nothing more is admitted.
        var failure: Int32?
        var checkpoints = 0
        /// Records appended since the last checkpoint.
        var appended = 0
    }

    /// What a journal read at start-up found.
    struct Replay {
        var digests: [KeyDigest] = []
        var clear = false
        /// Records read.
        var records = 0
    }

    /// What an append answered.
    enum Admission: Equatable {
        /// Recorded; the operation may be acknowledged once queued.
        case recorded
        /// Full of operations still waiting for the disk queue: retry once some have been applied.
        case wait
        /// Cannot record (full of keys whose stale files cannot be deleted, or the journal cannot be
        /// written): the operation must not be acknowledged.
        case refused(String)
    }

    private init(capacity: Int, fds: [Int32], epoch: UInt32, active: Int) {
        self.capacity = capacity
        self.fds = fds
        // Appends wait for the first checkpoint, which the store makes right after replaying.
        self.state = CachetLock(State(active: active, epoch: epoch, used: capacity))
    }

    deinit {
        for fd in fds where fd >= 0 { close(fd) }
    }

    /// Opens (creating at full size) both journal files and reads what they hold.
    /// - Returns: the journal, or nil with the errno when it cannot be opened or sized; and the replay.
    static func open(directory: String, capacity: Int) -> (journal: DiskJournal?, failure: Int32?, replay: Replay) {
        var replay = Replay()
        var fds: [Int32] = []
        var failure: Int32?
        var newestEpoch: UInt32 = 0
        var newestFile = 0
        let size = headerSize + capacity * recordSize
        for (position, name) in fileNames.enumerated() {
            let path = directory + "/" + name
            var fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            if fd < 0 {
                failure = failure ?? errno
                // Still read what is there, so that its invalidations are applied.
                fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
                if fd >= 0 {
                    newestEpoch = max(newestEpoch, read(fd, into: &replay))
                    close(fd)
                }
                continue
            }
            let epoch = read(fd, into: &replay)
            if epoch > newestEpoch {
                newestEpoch = epoch
                newestFile = position
            }
            if failure == nil, let sizing = allocate(fd, size: size) { failure = sizing }
            fds.append(fd)
        }
        guard failure == nil, fds.count == 2 else {
            for fd in fds { close(fd) }
            return (nil, failure ?? EBADF, replay)
        }
        // The file with the newer epoch holds everything that matters in the other one (a checkpoint
        // copies what is pending), so the next checkpoint overwrites the older one.
        return (DiskJournal(capacity: capacity, fds: fds, epoch: newestEpoch, active: newestFile), nil, replay)
    }

    /// Makes the file `size` bytes of allocated blocks: `fallocate`, or zeros written where it is not
    /// supported. Returns the errno on failure.
    private static func allocate(_ fd: Int32, size: Int) -> Int32? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return errno }
        if Int(info.st_size) >= size { return nil }
        let code = posix_fallocate(fd, 0, off_t(size))
        if code == 0 { return nil }
        guard code == EOPNOTSUPP || code == EINVAL else { return code }
        let zeros = [UInt8](repeating: 0, count: 64 * 1024)
        var offset = Int(info.st_size)
        while offset < size {
            let n = zeros.withUnsafeBytes { pwrite(fd, $0.baseAddress, min($0.count, size - offset), off_t(offset)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return n < 0 ? errno : ENOSPC }
            offset += n
        }
        return nil
    }

    /// Reads one file's valid records into `replay`; returns its epoch (0 when empty or invalid).
    private static func read(_ fd: Int32, into replay: inout Replay) -> UInt32 {
        var header = [UInt8](repeating: 0, count: headerSize)
        guard header.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, headerSize, 0) }) == headerSize,
            let epoch = decodeHeader(header), epoch != 0
        else { return 0 }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return epoch }
        let records = max(0, (Int(info.st_size) - headerSize) / recordSize)
        let chunkRecords = 4096
        var index = 0
        var chunk = [UInt8](repeating: 0, count: chunkRecords * recordSize)
        reading: while index < records {
            let count = min(chunkRecords, records - index)
            let n = chunk.withUnsafeMutableBytes {
                pread(fd, $0.baseAddress, count * recordSize, off_t(headerSize + index * recordSize))
            }
            guard n == count * recordSize else { break }
            for record in 0..<count {
                let offset = record * recordSize
                let decoded = chunk.withUnsafeBytes {
                    decodeRecord(UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + recordSize)]), epoch: epoch)
                }
                switch decoded {
                case .none:
                    break reading
                case .some(.none):
                    replay.clear = true
                case .some(.some(let digest)):
                    replay.digests.append(digest)
                }
                replay.records += 1
            }
            index += count
        }
        return epoch
    }

    /// The 16-byte header: `magic` (the journal's unless told), version 1, three zero bytes, `epoch`,
    /// CRC-32 of the 12 bytes before it. The stand-in log file (``CachetStandInLogFile``) shares it.
    static func encodeHeader(epoch: UInt32, magic: [UInt8] = DiskJournal.magic) -> [UInt8] {
        var bytes = magic
        bytes += [1, 0, 0, 0]
        DiskEntryFormat.append(epoch, to: &bytes)
        let crc = bytes.withUnsafeBytes { DiskEntryFormat.crc32($0) }
        DiskEntryFormat.append(crc, to: &bytes)
        return bytes
    }

    /// The epoch of a valid header with `magic`, or nil.
    static func decodeHeader(_ bytes: [UInt8], magic: [UInt8] = DiskJournal.magic) -> UInt32? {
        bytes.withUnsafeBytes { raw -> UInt32? in
            guard raw.count >= headerSize, Array(raw[0..<4]) == magic, raw[4] == 1,
                DiskEntryFormat.crc32(UnsafeRawBufferPointer(rebasing: raw[0..<12]))
                    == DiskEntryFormat.read(UInt32.self, raw, at: 12)
            else { return nil }
            return DiskEntryFormat.read(UInt32.self, raw, at: 8)
        }
    }

    /// Appends one record (a key's digest, or nil for CLEAR) to `bytes`.
    static func encodeRecord(_ digest: KeyDigest?, epoch: UInt32, to bytes: inout [UInt8]) {
        let start = bytes.count
        bytes += repeatElement(0, count: recordSize)
        bytes.withUnsafeMutableBytes {
            encodeRecord(digest, epoch: epoch, into: UnsafeMutableRawBufferPointer(rebasing: $0[start...]))
        }
    }

    /// Writes one record into `record` (`recordSize` bytes): epoch (u32), kind (1 key, 2 CLEAR), three
    /// zero bytes, the digest (zero for CLEAR), CRC-32 of the 40 bytes before it.
    static func encodeRecord(_ digest: KeyDigest?, epoch: UInt32, into record: UnsafeMutableRawBufferPointer) {
        record.storeBytes(of: epoch.bigEndian, toByteOffset: 0, as: UInt32.self)
        let kind = UInt32(digest == nil ? clearRecord : keyRecord) << 24
        record.storeBytes(of: kind.bigEndian, toByteOffset: 4, as: UInt32.self)
        var words = digest ?? KeyDigest(a: 0, b: 0, c: 0, d: 0)
        withUnsafeBytes(of: &words) { UnsafeMutableRawBufferPointer(rebasing: record[8..<40]).copyMemory(from: $0) }
        let crc = DiskEntryFormat.crc32(UnsafeRawBufferPointer(rebasing: record[0..<40]))
        record.storeBytes(of: crc.bigEndian, toByteOffset: 40, as: UInt32.self)
    }

    /// nil when the record is not valid for `epoch` (the end of the journal); .some(nil) for CLEAR.
    static func decodeRecord(_ raw: UnsafeRawBufferPointer, epoch: UInt32) -> KeyDigest?? {
        guard raw.count == recordSize,
            DiskEntryFormat.crc32(UnsafeRawBufferPointer(rebasing: raw[0..<40]))
                == DiskEntryFormat.read(UInt32.self, raw, at: 40),
            DiskEntryFormat.read(UInt32.self, raw, at: 0) == epoch
        else { return nil }
        switch raw[4] {
        case clearRecord:
            return .some(nil)
        case keyRecord:
            var digest = KeyDigest(a: 0, b: 0, c: 0, d: 0)
            withUnsafeMutableBytes(of: &digest) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: raw[8..<40])) }
            return .some(digest)
        default:
            return nil
        }
    }

    // MARK: Appending and applying

    /// Records that an operation on `digest` (nil: CLEAR) is about to be queued, before it is acknowledged.
    /// When the active file is full, checkpoints first, keeping `survivors()` (digests whose stale files
    /// could not be deleted, and whether a CLEAR failed) and the operations still pending.
    func record(
        _ digest: KeyDigest?,
        survivors: () -> (digests: Set<KeyDigest>, clear: Bool)
    ) -> Admission {
        state.withLock { state -> Admission in
            if let failure = state.failure {
                return .refused("the disk journal cannot be written (\(DiskFiles.describe(failure)))")
            }
            if state.used >= capacity {
                let kept = survivors()
                let needed = Self.survivorCount(state, kept) + 1
                if needed > capacity {
                    if !state.pending.isEmpty || state.pendingClears > 0 { return .wait }
                    return .refused(
                        "the disk journal is full of \(kept.digests.count) keys whose stale entry files cannot be deleted"
                    )
                }
                checkpoint(&state, kept)
                if let failure = state.failure {
                    return .refused("the disk journal cannot be written (\(DiskFiles.describe(failure)))")
                }
            }
            let offset = off_t(Self.headerSize + state.used * Self.recordSize)
            let written = withUnsafeTemporaryAllocation(byteCount: Self.recordSize, alignment: 8) { record in
                Self.encodeRecord(digest, epoch: state.epoch, into: record)
                while true {
                    let n = pwrite(fds[state.active], record.baseAddress, Self.recordSize, offset)
                    if n < 0 && errno == EINTR { continue }
                    return n == Self.recordSize ? Int32(0) : (n < 0 ? errno : ENOSPC)
                }
            }
            if written != 0 {
                let failure = written
                state.failure = failure
                return .refused("the disk journal cannot be written (\(DiskFiles.describe(failure)))")
            }
            state.used += 1
            state.appended += 1
            if let digest {
                state.pending[digest, default: 0] += 1
            } else {
                state.pendingClears += 1
            }
            return .recorded
        }
    }

    /// Records a digest (nil: CLEAR) whose stale file could not be deleted, unless an operation on it is
    /// journaled and pending (a checkpoint keeps it then).
    /// - Returns: whether the journal holds it; false when it is full or cannot be written, and the
    ///   survivor is known in memory only.
    @discardableResult
    func recordSurvivor(_ digest: KeyDigest?, survivors: () -> (digests: Set<KeyDigest>, clear: Bool)) -> Bool {
        let journaled = state.withLock { state in
            digest.map { state.pending[$0] != nil } ?? (state.pendingClears > 0)
        }
        guard !journaled else { return true }
        guard case .recorded = record(digest, survivors: survivors) else { return false }
        applied(digest)
        return true
    }

    /// Marks one journaled operation on `digest` (nil: CLEAR) as applied by the disk queue, successfully
    /// or not (a failure has made it a survivor).
    func applied(_ digest: KeyDigest?) {
        state.withLock { state in
            if let digest {
                if let count = state.pending[digest] {
                    state.pending[digest] = count > 1 ? count - 1 : nil
                }
            } else {
                state.pendingClears = max(0, state.pendingClears - 1)
            }
        }
    }

    /// Checkpoints once a sixteenth of the capacity has been appended since the last checkpoint, or
    /// (`settling`) once anything has been, if the survivors fit in a quarter of it: appends rarely find
    /// the journal full, and a crash invalidates only the keys journaled since the last checkpoint besides
    /// those still queued. Called on the disk queue after applying operations, and with `settling` when
    /// the queue has been idle for a moment (``CachetDiskWorker``), so that what was applied before a quiet
    /// spell survives a crash.
    func checkpointIfDue(settling: Bool = false, survivors: () -> (digests: Set<KeyDigest>, clear: Bool)) {
        state.withLock { state in
            guard state.failure == nil, state.appended >= (settling ? 1 : max(8, capacity / 16)) else { return }
            let kept = survivors()
            guard Self.survivorCount(state, kept) <= capacity / 4 else { return }
            checkpoint(&state, kept)
        }
    }

    /// Checkpoints now (at start-up and at a clean shutdown). Returns false when the journal cannot be
    /// written or the survivors do not fit.
    @discardableResult
    func checkpoint(survivors: () -> (digests: Set<KeyDigest>, clear: Bool)) -> Bool {
        state.withLock { state in
            guard state.failure == nil else { return false }
            let kept = survivors()
            guard Self.survivorCount(state, kept) <= capacity else { return false }
            checkpoint(&state, kept)
            return state.failure == nil
        }
    }

    private static func survivorCount(_ state: State, _ kept: (digests: Set<KeyDigest>, clear: Bool)) -> Int {
        var count = state.pending.count + (state.pendingClears > 0 || kept.clear ? 1 : 0)
        for digest in kept.digests where state.pending[digest] == nil { count += 1 }
        return count
    }

    /// Writes the pending operations and the survivors to the other file under a new epoch, records first
    /// and header last, then marks the old file empty. A crash at any point leaves a superset of them
    /// readable.
    private func checkpoint(_ state: inout State, _ kept: (digests: Set<KeyDigest>, clear: Bool)) {
        let epoch = state.epoch &+ 1 == 0 ? 1 : state.epoch &+ 1
        var records: [UInt8] = []
        var count = 0
        if state.pendingClears > 0 || kept.clear {
            Self.encodeRecord(nil, epoch: epoch, to: &records)
            count += 1
        }
        for digest in state.pending.keys {
            Self.encodeRecord(digest, epoch: epoch, to: &records)
            count += 1
        }
        for digest in kept.digests where state.pending[digest] == nil {
            Self.encodeRecord(digest, epoch: epoch, to: &records)
            count += 1
        }
        let next = 1 - state.active
        // Whatever follows the new records in that file belongs to an older epoch and ends the replay.
        if let failure = DiskFiles.writeAll(fds[next], records, at: Self.headerSize)
            ?? DiskFiles.writeAll(fds[next], Self.encodeHeader(epoch: epoch), at: 0)
            ?? DiskFiles.writeAll(fds[state.active], [UInt8](repeating: 0, count: Self.headerSize), at: 0)
        {
            state.failure = failure
            return
        }
        state.active = next
        state.epoch = epoch
        state.used = count
        state.appended = 0
        state.checkpoints += 1
    }

    /// Records in the active file, and checkpoints done since opening.
    var usage: (records: Int, checkpoints: Int) { state.withLock { ($0.used, $0.checkpoints) } }

    /// The first write failure, if any.
    var failure: Int32? { state.withLock { $0.failure } }
}
