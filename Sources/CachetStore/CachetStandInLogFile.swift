#if canImport(Glibc)
import CachetLocking
import Glibc
#endif

/// The file a node of a cluster keeps its stand-in log in (`standin-log` in the data directory), so that
/// what it wrote for a member that was down, and has not told that member yet, survives its own crash.
/// `Protocol/CLUSTER.md` ("The stand-in's log") says why; `Protocol/DISK-FORMAT.md` ("Stand-in log
/// file") gives the format.
///
/// The file only stores records: the node decides what to write (`CachetStandInLog` in `CachetCluster`
/// keeps the log's rules and does no I/O). Each record is appended with one `pwrite` before the write it
/// records is answered; like the invalidation journal it is not synced, so it survives the process dying,
/// not a power loss. Records: a key written for an owner, an owner's log overflowed (the owner will get a
/// CLEAR), an owner told everything (its earlier records no longer count). ``rewrite(_:)`` replaces the
/// file with the live records only (a temporary file renamed over it); ``ownerClean(_:live:)`` does it
/// when the dead records outweigh the live ones.
///
/// `@unchecked Sendable`: the descriptor and offsets are read and written only under `state`'s lock.
package final class CachetStandInLogFile: @unchecked Sendable {
    /// The file's name in the data directory.
    package static let fileName = "standin-log"
    static let magic: [UInt8] = Array("CCHS".utf8)
    static let headerSize = DiskJournal.headerSize
    /// Bytes of a record besides its owner id and key: length (4), kind (1), owner length (1), key length
    /// (2), CRC-32 (4).
    static let recordOverhead = 12
    static let maximumOwnerLength = 255
    static let maximumKeyLength = 4096
    /// The file's budget by default: part of `--disk-limit` on a node of a cluster.
    package static let defaultMaximumFileBytes = 4 << 20
    /// A file the rewrite would shrink to less than half is rewritten once it is at least this big.
    static let compactionThreshold = 64 << 10

    private static let keyKind: UInt8 = 1
    private static let overflowedKind: UInt8 = 2
    private static let cleanKind: UInt8 = 3

    /// One record.
    package enum Record: Sendable, Hashable {
        /// `key` was written or deleted for `owner`.
        case key(owner: String, key: [UInt8])
        /// `owner`'s log overflowed: it must get a CLEAR.
        case overflowed(owner: String)
        /// `owner` acknowledged every invalidation: the records before this one about it are void.
        case clean(owner: String)

        var owner: String {
            switch self {
            case .key(let owner, _), .overflowed(let owner), .clean(let owner): return owner
            }
        }
    }

    /// What one owner's records add up to.
    package struct Owner: Sendable, Hashable {
        /// The keys recorded (at most the limits; more overflow).
        package var keys: Set<[UInt8]> = []
        /// Key bytes in `keys`.
        package var bytes = 0
        /// Whether the log overflowed for the owner (or the file could not be read whole).
        package var overflowed = false
    }

    /// What reading the file found.
    package struct Replay: Sendable, Hashable {
        /// Owners with records since their last `clean` record.
        package var owners: [String: Owner] = [:]
        /// Records read.
        package var records = 0
        /// Why the file could not be read whole (a bad header, a corrupt record, a read error): what
        /// followed may have named any owner. Nil when every byte was read (but for `truncatedTail`).
        package var damage: String?
        /// Bytes of a last record cut short (an append that did not finish), ignored.
        package var truncatedTail = 0
        /// Bytes of valid header and records, from the file's start.
        package var validLength = 0
    }

    private struct State {
        /// -1 until ``rewrite(_:)`` has made the file.
        var fd: Int32 = -1
        /// Where the next record goes: the end of the valid records.
        var end = 0
        /// Bytes of records that still count, per owner (those since its last clean record).
        var live: [String: Int] = [:]
        /// Rewrites since opening.
        var generation: UInt32 = 0
    }

    /// The data directory.
    package let directory: String
    private let state = CachetLock(State())

    /// The file's path.
    package var path: String { directory + "/" + Self.fileName }

    /// The most bytes the file may take: a key that would take it past this is recorded as its owner's
    /// overflow instead (``hasRoom(forKey:owner:)``).
    package let maximumFileBytes: Int

    private init(directory: String, maximumFileBytes: Int) {
        self.directory = directory
        self.maximumFileBytes = maximumFileBytes
    }

    /// Whether a record of `key` for `owner` fits in the file's budget (``maximumFileBytes``). When it
    /// does not, the node records the owner's overflow instead: a few bytes, once per owner, after which its
    /// return is a CLEAR.
    package func hasRoom(forKey key: [UInt8], owner: String) -> Bool {
        let size = Self.recordOverhead + owner.utf8.count + key.count
        return state.withLock { $0.end + size <= maximumFileBytes }
    }

    deinit {
        state.withLock { state in
            if state.fd >= 0 { close(state.fd) }
        }
    }

    /// Reads the file in `directory` (nothing when there is none). Nothing is written: call
    /// ``rewrite(_:)`` with what the node keeps before appending.
    /// - Parameters:
    ///   - directory: the data directory.
    ///   - maximumKeys: keys per owner before its log overflows.
    ///   - maximumBytes: key bytes per owner before its log overflows.
    ///   - maximumFileBytes: the file's budget (``hasRoom(forKey:owner:)``).
    /// - Returns: the file, not yet writable, and what it held.
    package static func open(
        directory: String,
        maximumKeys: Int,
        maximumBytes: Int,
        maximumFileBytes: Int = defaultMaximumFileBytes
    ) -> (file: CachetStandInLogFile, replay: Replay) {
        let file = CachetStandInLogFile(directory: directory, maximumFileBytes: maximumFileBytes)
        switch DiskFiles.read(file.path) {
        case .missing:
            return (file, Replay())
        case .failed(let code):
            var replay = Replay()
            replay.damage = "cannot be read (\(DiskFiles.describe(code)))"
            return (file, replay)
        case .bytes(let bytes):
            return (file, decode(bytes, maximumKeys: maximumKeys, maximumBytes: maximumBytes))
        }
    }

    // MARK: The format

    /// Reads a whole file's bytes. Never fails: a bad header or a corrupt record ends the reading with
    /// `damage` set; a last record cut short ends it with `truncatedTail` set.
    /// - Parameters:
    ///   - bytes: the file.
    ///   - maximumKeys: keys per owner before its log overflows.
    ///   - maximumBytes: key bytes per owner before its log overflows.
    /// - Returns: what the records add up to.
    package static func decode(_ bytes: [UInt8], maximumKeys: Int, maximumBytes: Int) -> Replay {
        var replay = Replay()
        guard !bytes.isEmpty else { return replay }
        guard bytes.count >= headerSize, DiskJournal.decodeHeader(Array(bytes[0..<headerSize]), magic: magic) != nil
        else {
            replay.damage = "its header is not a stand-in log header"
            return replay
        }
        var offset = headerSize
        replay.validLength = offset
        bytes.withUnsafeBytes { raw in
            while offset < raw.count {
                switch decodeRecord(UnsafeRawBufferPointer(rebasing: raw[offset...])) {
                case .record(let record, let length):
                    apply(record, to: &replay.owners, maximumKeys: maximumKeys, maximumBytes: maximumBytes)
                    replay.records += 1
                    offset += length
                    replay.validLength = offset
                case .truncated:
                    replay.truncatedTail = raw.count - offset
                    return
                case .corrupt(let why):
                    replay.damage = "record \(replay.records + 1) at byte \(offset) \(why)"
                    return
                }
            }
        }
        return replay
    }

    private static func apply(
        _ record: Record,
        to owners: inout [String: Owner],
        maximumKeys: Int,
        maximumBytes: Int
    ) {
        switch record {
        case .key(let owner, let key):
            var entry = owners[owner] ?? Owner()
            if !entry.overflowed && !entry.keys.contains(key) {
                if entry.keys.count >= maximumKeys || entry.bytes + key.count > maximumBytes {
                    entry.overflowed = true
                } else {
                    entry.keys.insert(key)
                    entry.bytes += key.count
                }
            }
            owners[owner] = entry
        case .overflowed(let owner):
            owners[owner, default: Owner()].overflowed = true
        case .clean(let owner):
            owners[owner] = nil
        }
    }

    enum Decoded {
        case record(Record, length: Int)
        /// The bytes end inside a record whose fields read so far are consistent.
        case truncated
        case corrupt(String)
    }

    /// Decodes the record at the start of `raw` (which runs to the end of the file).
    static func decodeRecord(_ raw: UnsafeRawBufferPointer) -> Decoded {
        guard raw.count >= 4 else { return .truncated }
        let length = Int(DiskEntryFormat.read(UInt32.self, raw, at: 0))
        guard length >= recordOverhead + 1, length <= recordOverhead + maximumOwnerLength + maximumKeyLength else {
            return .corrupt("has an impossible length \(length)")
        }
        if raw.count >= 8 {
            let kind = raw[4]
            let ownerLength = Int(raw[5])
            let keyLength = Int(raw[6]) << 8 | Int(raw[7])
            guard kind == keyKind || kind == overflowedKind || kind == cleanKind else {
                return .corrupt("has an unknown kind \(kind)")
            }
            guard ownerLength >= 1, length == recordOverhead + ownerLength + keyLength,
                (kind == keyKind) == (keyLength > 0)
            else { return .corrupt("has inconsistent lengths") }
        }
        guard raw.count >= length else { return .truncated }
        let crc = DiskEntryFormat.crc32(UnsafeRawBufferPointer(rebasing: raw[0..<(length - 4)]))
        guard crc == DiskEntryFormat.read(UInt32.self, raw, at: length - 4) else {
            return .corrupt("fails its checksum")
        }
        let ownerLength = Int(raw[5])
        let owner = String(decoding: raw[8..<(8 + ownerLength)], as: UTF8.self)
        switch raw[4] {
        case keyKind:
            return .record(.key(owner: owner, key: Array(raw[(8 + ownerLength)..<(length - 4)])), length: length)
        case overflowedKind: return .record(.overflowed(owner: owner), length: length)
        default: return .record(.clean(owner: owner), length: length)
        }
    }

    /// Appends one record to `bytes`: length of the whole record (u32), kind (1 key, 2 overflowed,
    /// 3 clean), owner id length (u8), key length (u16, 0 but for a key), the owner id, the key, CRC-32
    /// of everything before it. Integers big-endian.
    /// - Precondition: the owner id is 1 to 255 bytes, the key 1 to 4096.
    static func encode(_ record: Record, to bytes: inout [UInt8]) {
        let start = bytes.count
        let owner = Array(record.owner.utf8)
        let kind: UInt8
        var key: [UInt8] = []
        switch record {
        case .key(_, let written):
            kind = keyKind
            key = written
        case .overflowed: kind = overflowedKind
        case .clean: kind = cleanKind
        }
        DiskEntryFormat.append(UInt32(recordOverhead + owner.count + key.count), to: &bytes)
        bytes.append(kind)
        bytes.append(UInt8(owner.count))
        bytes.append(UInt8(key.count >> 8))
        bytes.append(UInt8(key.count & 0xff))
        bytes += owner
        bytes += key
        let crc = bytes.withUnsafeBytes { DiskEntryFormat.crc32(UnsafeRawBufferPointer(rebasing: $0[start...])) }
        DiskEntryFormat.append(crc, to: &bytes)
    }

    /// Whether a record can hold `owner` and `key` (the node's ids and keys always fit).
    static func fits(owner: String, key: [UInt8]) -> Bool {
        (1...maximumOwnerLength).contains(owner.utf8.count) && key.count <= maximumKeyLength
    }

    // MARK: Writing

    /// Replaces the file with `owners`' records (a temporary file renamed over it) and appends to it from
    /// then on. An overflowed owner's keys are not written: its CLEAR covers them.
    /// - Parameter owners: every owner whose records still count, with its keys and whether it overflowed.
    /// - Returns: nil, or why the file could not be replaced (the old one, if any, is still used then).
    package func rewrite(_ owners: [(owner: String, keys: [[UInt8]], overflowed: Bool)]) -> CachetStoreError? {
        state.withLock { state in rewrite(owners, &state) }
    }

    private func rewrite(
        _ owners: [(owner: String, keys: [[UInt8]], overflowed: Bool)],
        _ state: inout State
    ) -> CachetStoreError? {
        let consequence =
            state.fd >= 0
            ? "so it keeps records that no longer count (they cost misses after a restart, never a stale value)"
            : "so writes for a member that is down are refused; make the data directory writable and restart the node"
        let generation = state.generation &+ 1
        var bytes = DiskJournal.encodeHeader(epoch: generation, magic: Self.magic)
        var live: [String: Int] = [:]
        for (owner, keys, overflowed) in owners where overflowed || !keys.isEmpty {
            let before = bytes.count
            if overflowed {
                Self.encode(.overflowed(owner: owner), to: &bytes)
            } else {
                for key in keys where Self.fits(owner: owner, key: key) {
                    Self.encode(.key(owner: owner, key: key), to: &bytes)
                }
            }
            live[owner] = bytes.count - before
        }
        if let code = DiskFiles.replace(path, with: bytes, temporary: path + ".tmp") {
            return failure("cannot be replaced", code, consequence)
        }
        let fd = Glibc.open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return failure("cannot be opened", errno, consequence) }
        if state.fd >= 0 { close(state.fd) }
        state.fd = fd
        state.end = bytes.count
        state.live = live
        state.generation = generation
        return nil
    }

    /// Appends one record, before the write it records is answered.
    /// - Parameter record: a key or an overflow (``ownerClean(_:live:)`` writes clean records).
    /// - Returns: nil, or why it could not be written: the write must then be refused.
    package func append(_ record: Record) -> CachetStoreError? {
        state.withLock { state in
            guard state.fd >= 0 else {
                return CachetStoreError(
                    code: .writeRefused,
                    message:
                        "the stand-in log file in \(directory) could not be opened at start-up, so writes for a member "
                        + "that is down are refused; make the data directory writable and restart the node"
                )
            }
            if case .key(let owner, let key) = record, !Self.fits(owner: owner, key: key) {
                return CachetStoreError(
                    code: .writeRefused,
                    message: "the stand-in log cannot hold a key of \(key.count) bytes for member \(owner)"
                )
            }
            var bytes: [UInt8] = []
            Self.encode(record, to: &bytes)
            if let code = DiskFiles.writeAll(state.fd, bytes, at: state.end) {
                // Whatever part of the record reached the file is cut off (the next record overwrites it
                // anyway); the write is refused.
                _ = ftruncate(state.fd, off_t(state.end))
                return failure("cannot be written", code)
            }
            state.end += bytes.count
            state.live[record.owner, default: 0] += bytes.count
            return nil
        }
    }

    /// `owner` was told everything: its records no longer count. With no owner left the file is cut back
    /// to its header; otherwise a clean record is appended, and the file is rewritten with `live()` (every
    /// owner whose records still count) when that would shrink it to less than half and it holds at least
    /// 64 KiB. A failure is returned for the log but refuses nothing: the owner's records then stay and
    /// are delivered again after a restart, which costs misses, never a stale value.
    /// - Parameters:
    ///   - owner: the owner's id.
    ///   - live: the owners whose records still count, with their keys and overflow.
    /// - Returns: nil, or what could not be written.
    @discardableResult
    package func ownerClean(
        _ owner: String,
        live: () -> [(owner: String, keys: [[UInt8]], overflowed: Bool)]
    ) -> CachetStoreError? {
        state.withLock { state in
            guard state.fd >= 0, state.live[owner] != nil else { return nil }
            let kept = "so a member already told everything is told again after a restart"
            state.live[owner] = nil
            if state.live.isEmpty {
                guard ftruncate(state.fd, off_t(Self.headerSize)) == 0 else {
                    return failure("cannot be cut back", errno, kept)
                }
                state.end = Self.headerSize
                return nil
            }
            var bytes: [UInt8] = []
            Self.encode(.clean(owner: owner), to: &bytes)
            if let code = DiskFiles.writeAll(state.fd, bytes, at: state.end) {
                _ = ftruncate(state.fd, off_t(state.end))
                return failure("cannot be written", code, kept)
            }
            state.end += bytes.count
            let liveBytes = Self.headerSize + state.live.values.reduce(0, +)
            guard state.end >= Self.compactionThreshold, state.end > 2 * liveBytes else { return nil }
            return rewrite(live(), &state)
        }
    }

    /// The file's size as written (header and records), and rewrites since opening.
    package var usage: (bytes: Int, rewrites: Int) { state.withLock { ($0.end, Int($0.generation)) } }

    /// - Parameters:
    ///   - what: what failed.
    ///   - code: the errno.
    ///   - consequence: what it means for the node, with what to do.
    private func failure(
        _ what: String,
        _ code: Int32,
        _ consequence: String =
            "so a write for a member that is down cannot be recorded and is refused; free space or make the data "
            + "directory writable"
    ) -> CachetStoreError {
        CachetStoreError(
            code: .writeRefused,
            message: "the stand-in log file \(path) \(what) (\(DiskFiles.describe(code))), \(consequence)"
        )
    }

}
