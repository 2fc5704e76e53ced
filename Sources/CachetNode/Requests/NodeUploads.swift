import CachetLocking
import CachetStore
import CachetWire

/// The values being received in parts on a node (PUTs with the `part` flag, `Protocol/PROTOCOL.md`, "PUT in
/// parts"), shared by every loop: which parts each upload has taken, so that parts out of order are refused,
/// and which to give up: those of a connection that closed, and those without a part for
/// ``idleSeconds``. Their bytes go to staging files of the disk tier (``CachetDiskUpload``), never to
/// memory; what is staged is bounded by ``byteLimit``, their number by ``countLimit``.
final class NodeUploads: Sendable {
    /// An upload is named by its key and the id its client chose.
    struct Name: Hashable {
        var key: [UInt8]
        var upload: UInt64
    }

    struct Upload {
        let disk: CachetDiskUpload
        /// Value bytes accepted so far: the next part's offset.
        var received: Int
        /// When its last part arrived (the store's clock, seconds).
        var lastPart: UInt32
        /// The connection its parts arrive on (the last one that sent one).
        var connection: ObjectIdentifier
    }

    struct State {
        var uploads: [Name: Upload] = [:]
        /// The announced lengths of the uploads in progress.
        var stagedBytes = 0
        /// Uploads given up (closed, idle, refused part), for STATS.
        var abandoned = 0
        /// Uploads stored.
        var completed = 0
    }

    let countLimit: Int
    let byteLimit: Int
    let idleSeconds: UInt32
    private let state = CachetLock(State())

    /// - Parameters:
    ///   - countLimit: uploads in progress at once.
    ///   - byteLimit: the sum of their announced lengths.
    ///   - idleSeconds: an upload without a part for this long is given up.
    init(countLimit: Int = 256, byteLimit: Int, idleSeconds: UInt32) {
        self.countLimit = countLimit
        self.byteLimit = byteLimit
        self.idleSeconds = idleSeconds
    }

    /// What a part came to.
    enum Admission {
        /// Taken: write its bytes to `upload`; `last` when they end the value (commit it then). `replaced`:
        /// an unfinished upload of the same name this first part replaces, whose staging file is to go.
        case accepted(CachetDiskUpload, last: Bool, replaced: CachetDiskUpload? = nil)
        /// Refused with this status and message; an upload it belonged to is given up (returned, for its
        /// staging file to be deleted).
        case refused(CachetStatus, String, abandoned: CachetDiskUpload?)
    }

    /// Checks a part against its upload (a part at offset 0 starts one, replacing an unfinished one of
    /// the same name) and takes it.
    func admit(
        key: UnsafeRawBufferPointer,
        part: CachetUploadPart,
        expiry: UInt32,
        connection: ObjectIdentifier,
        now: UInt32,
        begin: (Int) -> CachetDiskUpload
    ) -> Admission {
        let name = Name(key: Array(key), upload: part.upload)
        let count = part.bytes.count
        return state.withLock { state -> Admission in
            guard count > 0 || part.total == 0 else {
                // Refused, and the upload it belongs to given up, as for any refused part.
                let given = state.uploads.removeValue(forKey: name)
                if let given {
                    state.stagedBytes -= given.disk.total
                    state.abandoned += 1
                }
                return .refused(
                    .badRequest,
                    "a part carries at least one byte (only a value of length 0 has none); upload given up",
                    abandoned: given?.disk
                )
            }
            if part.offset == 0 {
                let replaced = state.uploads.removeValue(forKey: name)
                if let replaced {
                    state.stagedBytes -= replaced.disk.total
                    state.abandoned += 1
                }
                // The entry holds the key as well as the value.
                guard part.total <= UInt64(max(0, byteLimit - key.count)) else {
                    return .refused(
                        .tooLarge,
                        "a value of \(part.total) bytes does not fit the disk tier (at most \(byteLimit) bytes of key "
                            + "and value)",
                        abandoned: replaced?.disk
                    )
                }
                let total = Int(part.total)
                guard state.uploads.count < countLimit, state.stagedBytes + total <= byteLimit else {
                    return .refused(
                        .unavailable,
                        "\(state.uploads.count) uploads of \(state.stagedBytes) bytes are in progress (at most "
                            + "\(countLimit), of \(byteLimit) bytes together); retry",
                        abandoned: replaced?.disk
                    )
                }
                let upload = Upload(disk: begin(total), received: count, lastPart: now, connection: connection)
                // A value of one part is complete at once: nothing to keep.
                guard count < total else { return .accepted(upload.disk, last: true, replaced: replaced?.disk) }
                state.uploads[name] = upload
                state.stagedBytes += total
                return .accepted(upload.disk, last: false, replaced: replaced?.disk)
            }
            guard var upload = state.uploads[name] else {
                return .refused(
                    .badRequest,
                    "no upload \(part.upload) of the key in progress here (it never began with offset 0, finished, "
                        + "or was given up after \(idleSeconds) s without a part): start again from offset 0",
                    abandoned: nil
                )
            }
            guard part.offset == UInt64(upload.received), part.total == UInt64(upload.disk.total) else {
                state.uploads[name] = nil
                state.stagedBytes -= upload.disk.total
                state.abandoned += 1
                return .refused(
                    .badRequest,
                    part.total == UInt64(upload.disk.total)
                        ? "part at offset \(part.offset), where the upload has \(upload.received) bytes: parts go in order; upload given up"
                        : "part announces a length of \(part.total) bytes, the upload \(upload.disk.total); upload given up",
                    abandoned: upload.disk
                )
            }
            upload.received += count
            upload.lastPart = now
            upload.connection = connection
            let last = upload.received == upload.disk.total
            if last {
                state.uploads[name] = nil
                state.stagedBytes -= upload.disk.total
            } else {
                state.uploads[name] = upload
            }
            return .accepted(upload.disk, last: last)
        }
    }

    /// Gives up the uploads whose parts arrived on a connection that closed.
    func abandon(connection: ObjectIdentifier) -> [CachetDiskUpload] {
        remove { $0.connection == connection }
    }

    /// Counts an upload given up after its last part was taken (no longer in progress): its staging or
    /// commit failed, or its connection closed before the value was stored.
    func countGivenUp() {
        state.withLock { $0.abandoned += 1 }
    }

    /// Counts an upload whose value was stored.
    func completed() {
        state.withLock { $0.completed += 1 }
    }

    /// Forgets an upload whose staging failed.
    func abandon(_ upload: CachetDiskUpload) -> Bool {
        !remove { $0.disk === upload }.isEmpty
    }

    /// Gives up the uploads without a part for ``idleSeconds``.
    func sweep(now: UInt32) -> [CachetDiskUpload] {
        remove { now &- $0.lastPart >= idleSeconds && now >= $0.lastPart }
    }

    private func remove(where condition: (Upload) -> Bool) -> [CachetDiskUpload] {
        state.withLock { state in
            guard !state.uploads.isEmpty else { return [] }
            var removed: [CachetDiskUpload] = []
            for (name, upload) in state.uploads where condition(upload) {
                state.uploads[name] = nil
                state.stagedBytes -= upload.disk.total
                state.abandoned += 1
                removed.append(upload.disk)
            }
            return removed
        }
    }

    /// Uploads in progress, the bytes they announced, those given up (or whose value could not be stored)
    /// and those stored.
    var statistics: (inProgress: Int, stagedBytes: Int, abandoned: Int, completed: Int) {
        state.withLock { ($0.uploads.count, $0.stagedBytes, $0.abandoned, $0.completed) }
    }
}
