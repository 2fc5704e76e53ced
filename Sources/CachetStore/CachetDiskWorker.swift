import CachetLocking
import Dispatch
import Synchronization

/// What submitting a write or delete to the disk queue did.
public enum CachetDiskAdmission: Sendable {
    /// Journaled and queued: the operation may be acknowledged.
    case queued
    /// Nothing queued: too many writes wait, or the journal is full of operations not applied yet. Retry
    /// once ``CachetDiskWorker/notifyWhenWritable(_:)`` calls back.
    case full
    /// Nothing queued: the journal cannot record it, so acknowledging it could let a restart undo it.
    /// Answer with an error carrying the message.
    case refused(CachetStoreError)

    /// Whether the operation was queued.
    public var isQueued: Bool {
        if case .queued = self { return true }
        return false
    }
}

/// The dedicated disk queue in front of a ``CachetDiskStore``.
///
/// One serial `DispatchQueue` runs every file operation in submission order, so a read queued after a
/// write of the same key sees it. Writes are bounded: when ``CachetDiskConfiguration/queueCapacity`` of them
/// are waiting, or their keys and values hold ``CachetDiskConfiguration/queueByteCapacity`` bytes,
/// ``submitPut(key:value:expiry:)`` refuses and the caller waits for ``notifyWhenWritable(_:)`` rather than
/// dropping data. Completions run on the disk queue; callers hop
/// back to their own queue.
///
/// Every write and delete is recorded in the tier's journal before it is queued, so that once the caller
/// acknowledges it, neither a crash before the queue applies it nor a disk that refuses it can bring an
/// older value back (`Protocol/DISK-FORMAT.md`). When the journal cannot record one, the submission says
/// so and the caller must answer with an error instead.
public final class CachetDiskWorker: Sendable {
    /// The tier the worker writes to.
    public let store: CachetDiskStore
    private let queue = DispatchQueue(label: "cachet.disk", qos: .utility)
    /// Where the blocks of ranges are read, once the serial queue has opened their files
    /// (``getRange(key:offset:length:limit:now:completion:)``).
    private let readers = DispatchQueue(label: "cachet.disk.ranges", qos: .utility, attributes: .concurrent)
    private let pendingWrites = Atomic<Int>(0)
    /// Bytes of keys and values held by the writes queued and not yet applied.
    private let pendingBytes = Atomic<Int>(0)
    private let pendingOperations = Atomic<Int>(0)
    private let waiters = CachetLock<[@Sendable () -> Void]>([])
    private let sweepQueued = Atomic<Bool>(false)
    /// Whether a settle (``CachetDiskStore/settle()``) is scheduled on the queue.
    private let settleScheduled = Atomic<Bool>(false)
    /// How long after an operation the queue checkpoints the journal (when nothing else is pending):
    /// what was applied more than a second before a crash survives it.
    static let settleDelay: DispatchTimeInterval = .milliseconds(400)
    private let capacity: Int
    private let byteCapacity: Int
    /// Journaled operations applied so far; a PUT told to wait for the journal waits until this moves.
    private let appliedOperations = Atomic<Int>(0)
    /// `appliedOperations` when the journal or the byte bound last said wait, or -1: until an operation is
    /// applied, retrying cannot succeed.
    private let blockedAt = Atomic<Int>(-1)
    /// Writes, deletes and clears between their memory change and their submission, per key bucket.
    private let writes = CachetLock(WriteTracking())

    /// What a disk read promoted into memory must be checked against: a write of the same key whose
    /// memory change came after the read was queued, but whose disk operation runs after it, would
    /// otherwise be overwritten in memory by the older value read.
    struct WriteTracking {
        static let buckets = 4096
        var sequence: UInt64 = 0
        /// Per bucket: the sequence of the last write begun or submitted, and writes begun not submitted.
        var last = [UInt64](repeating: 0, count: buckets)
        var inFlight = [Int32](repeating: 0, count: buckets)
        var lastClear: UInt64 = 0
        var clearsInFlight = 0
        /// Keys with a write or delete queued but not applied yet: the latest one queued. An entry leaves
        /// when that operation is applied, or when a CLEAR is queued after it. At most one entry per queued
        /// operation: puts are bounded by the queue's capacity, deletes by the journal's (every queued
        /// operation holds a journal record until applied).
        var queued: [KeyDigest: QueuedOperation] = [:]
        /// CLEARs queued but not applied yet.
        var clearsQueued = 0
    }

    /// The latest write or delete of a key queued but not applied yet.
    struct QueuedOperation {
        /// The write's expiry (0 for never), or nil for a delete.
        var expiry: UInt32?
        /// `WriteTracking.sequence` when it was queued; the operation applied clears the entry only if
        /// it is still this one.
        var sequence: UInt64
    }

    private static func bucket(_ key: UnsafeRawBufferPointer) -> Int {
        Int(truncatingIfNeeded: CachetHash.hash(key, seed: 0x6361_6368_6574) % UInt64(WriteTracking.buckets))
    }

    /// Creates a worker for `store`.
    /// - Parameter store: the disk tier.
    public init(store: CachetDiskStore) {
        self.store = store
        self.capacity = max(1, store.configuration.queueCapacity)
        self.byteCapacity = max(1, store.configuration.queueByteCapacity)
    }

    /// Operations queued or running.
    public var queueDepth: Int { pendingOperations.load(ordering: .relaxed) }

    /// Bytes of keys and values held by the writes queued and not yet applied.
    public var queuedBytes: Int { pendingBytes.load(ordering: .relaxed) }

    private func enqueue(_ work: @escaping @Sendable () -> Void) {
        pendingOperations.add(1, ordering: .relaxed)
        queue.async { [self] in
            work()
            pendingOperations.subtract(1, ordering: .relaxed)
            scheduleSettle()
        }
    }

    /// Schedules one settle on the queue ``settleDelay`` from now, unless one is scheduled already; it runs
    /// behind whatever is queued by then, and again later if operations keep coming.
    private func scheduleSettle() {
        guard settleScheduled.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else {
            return
        }
        queue.asyncAfter(deadline: .now() + Self.settleDelay) { [self] in
            settleScheduled.store(false, ordering: .relaxed)
            store.settle()
        }
    }

    /// Journals and queues a write.
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    ///   - expiry: absolute expiry, 0 for never.
    ///   - fields: the item fields to keep with it, if any.
    /// - Returns: `.queued`; `.full`, queueing nothing, when the queue already holds its capacity of writes
    ///   or of bytes, or the journal is full of operations still waiting (wait with
    ///   ``notifyWhenWritable(_:)``); or
    ///   `.refused` when the journal cannot record it: the write must not be acknowledged.
    public func submitPut(
        key: [UInt8],
        value: [UInt8],
        expiry: UInt32,
        fields: CachetItemFields? = nil
    ) -> CachetDiskAdmission {
        while true {
            let current = pendingWrites.load(ordering: .relaxed)
            guard current < capacity else { return .full }
            if pendingWrites.compareExchange(expected: current, desired: current + 1, ordering: .relaxed).exchanged {
                break
            }
        }
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        let seen = appliedOperations.load(ordering: .acquiring)
        let size = key.count + value.count
        guard reserveBytes(size) else {
            blockedAt.store(seen, ordering: .releasing)
            pendingWrites.subtract(1, ordering: .relaxed)
            return .full
        }
        switch store.admit(digest) {
        case .recorded:
            break
        case .wait:
            blockedAt.store(seen, ordering: .releasing)
            pendingBytes.subtract(size, ordering: .relaxed)
            pendingWrites.subtract(1, ordering: .relaxed)
            return .full
        case .refused(let reason):
            pendingBytes.subtract(size, ordering: .relaxed)
            pendingWrites.subtract(1, ordering: .relaxed)
            wakeWaiters()
            key.withUnsafeBytes { endWrite(bucket: Self.bucket($0)) }
            return .refused(refusal("PUT", reason))
        }
        let bucket = key.withUnsafeBytes { Self.bucket($0) }
        writes.withLock { tracking in
            let sequence = tracking.sequence + 1
            enqueue { [self] in
                store.put(key: key, digest: digest, value: value, expiry: expiry, fields: fields)
                store.applied(digest)
                dequeued(digest, sequence: sequence)
                pendingBytes.subtract(size, ordering: .relaxed)
                pendingWrites.subtract(1, ordering: .relaxed)
                appliedOperations.add(1, ordering: .releasing)
                wakeWaiters()
            }
            Self.endWrite(&tracking, bucket: bucket)
            tracking.queued[digest] = QueuedOperation(expiry: expiry, sequence: sequence)
        }
        return .queued
    }

    /// Takes `size` bytes of the byte bound: always when nothing is queued (so that a write larger than the
    /// bound is queued alone), otherwise only within the bound.
    private func reserveBytes(_ size: Int) -> Bool {
        while true {
            let current = pendingBytes.load(ordering: .relaxed)
            guard current == 0 || current + size <= byteCapacity else { return false }
            if pendingBytes.compareExchange(expected: current, desired: current + size, ordering: .relaxed).exchanged {
                return true
            }
        }
    }

    private func refusal(_ operation: String, _ reason: String) -> CachetStoreError {
        CachetStoreError(
            code: .writeRefused,
            message:
                "\(operation) refused: \(reason); acknowledging it could let an older value come back after a restart "
                + "(see disk_errors and the node's log)"
        )
    }

    /// Calls `callback` once, when fewer than capacity writes are waiting (at once if that is already so).
    /// - Parameter callback: runs on the disk queue or on the caller's thread.
    public func notifyWhenWritable(_ callback: @escaping @Sendable () -> Void) {
        waiters.withLock { $0.append(callback) }
        wakeWaiters()
    }

    private func wakeWaiters() {
        guard pendingWrites.load(ordering: .relaxed) < capacity else { return }
        // Told to wait for the journal or the byte bound: nothing has been applied since, so retrying would
        // not help.
        let blocked = blockedAt.load(ordering: .acquiring)
        if blocked >= 0 && appliedOperations.load(ordering: .acquiring) == blocked { return }
        let ready = waiters.withLock { waiters -> [@Sendable () -> Void] in
            defer { waiters = [] }
            return waiters
        }
        for callback in ready { callback() }
    }

    /// Journals and queues a delete.
    /// - Parameter key: the key.
    /// - Returns: `.queued`, or `.refused` when the journal cannot record it (full, even of operations
    ///   still waiting, or unwritable): the delete must not be acknowledged.
    @discardableResult
    public func submitRemove(key: [UInt8]) -> CachetDiskAdmission {
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        let bucket = key.withUnsafeBytes { Self.bucket($0) }
        switch store.admit(digest) {
        case .recorded:
            break
        case .wait:
            endWrite(bucket: bucket)
            return .refused(refusal("DEL", "the disk journal is full of operations waiting for the disk; retry"))
        case .refused(let reason):
            endWrite(bucket: bucket)
            return .refused(refusal("DEL", reason))
        }
        writes.withLock { tracking in
            let sequence = tracking.sequence + 1
            enqueue { [self] in
                store.remove(digest: digest)
                store.applied(digest)
                dequeued(digest, sequence: sequence)
                appliedOperations.add(1, ordering: .releasing)
                wakeWaiters()
            }
            Self.endWrite(&tracking, bucket: bucket)
            tracking.queued[digest] = QueuedOperation(expiry: nil, sequence: sequence)
        }
        return .queued
    }

    /// Queues a sweep of expired entries (``CachetDiskStore/sweepExpired(now:budget:)``), unless one is
    /// already waiting, so that a timer calling this never piles sweeps up behind slow writes.
    /// - Parameters:
    ///   - now: the time expiry is judged at.
    ///   - budget: index entries to examine.
    public func submitSweep(now: UInt32, budget: Int) {
        guard sweepQueued.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        enqueue { [self] in
            sweepQueued.store(false, ordering: .relaxed)
            store.sweepExpired(now: now, budget: budget)
        }
    }

    /// Queues a read.
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the time expiry is judged at.
    ///   - completion: receives the entry or nil, on the disk queue.
    ///   - maximumValueLength: a longer value is not read (``CachetDiskEntry/oversizedLength``).
    public func get(
        key: [UInt8],
        now: UInt32,
        maximumValueLength: Int = .max,
        completion: @escaping @Sendable (CachetDiskEntry?) -> Void
    ) {
        let ticket = writes.withLock { $0.sequence }
        enqueue { [store] in
            var entry = store.get(key: key, now: now, maximumValueLength: maximumValueLength)
            entry?.readTicket = ticket
            completion(entry)
        }
    }

    // MARK: Uploads

    /// Starts an upload of a `total`-byte value for `key` (a chunked PUT): its parts go to
    /// ``writeUpload(_:bytes:completion:)``, then ``submitUploadCommit(_:completion:)`` makes it the key's
    /// value, or ``abortUpload(_:)`` deletes it.
    public func beginUpload(key: [UInt8], total: Int, expiry: UInt32) -> CachetDiskUpload {
        store.makeUpload(key: key, total: total, expiry: expiry)
    }

    /// Queues the next part of an upload's value; `completion` gets nil once written (into its block, and
    /// the block to the staging file once full), or why it failed, on the disk queue.
    public func writeUpload(
        _ upload: CachetDiskUpload,
        bytes: [UInt8],
        completion: @escaping @Sendable (String?) -> Void
    ) {
        enqueue { completion(bytes.withUnsafeBytes { upload.append($0) }) }
    }

    /// Journals and queues the commit of an upload whose every byte has been written
    /// (``writeUpload(_:bytes:completion:)``): from the journal record on, the key counts as written (a read
    /// goes to the disk queue, behind the commit), as for ``submitPut(key:value:expiry:)``. Call
    /// ``beginWrite(key:)`` before the key leaves memory. `completion` gets nil once the file is in place,
    /// or the error that made the key a miss instead, on the disk queue.
    /// - Returns: `.queued`; `.full` when the journal is full of operations still waiting (nothing queued:
    ///   retry after ``notifyWhenWritable(_:)``); `.refused` when the journal cannot record it.
    public func submitUploadCommit(
        _ upload: CachetDiskUpload,
        completion: @escaping @Sendable (CachetStoreError?) -> Void
    ) -> CachetDiskAdmission {
        let digest = upload.digest
        let bucket = upload.key.withUnsafeBytes { Self.bucket($0) }
        let seen = appliedOperations.load(ordering: .acquiring)
        switch store.admit(digest) {
        case .recorded:
            break
        case .wait:
            blockedAt.store(seen, ordering: .releasing)
            return .full
        case .refused(let reason):
            endWrite(bucket: bucket)
            return .refused(refusal("PUT", reason))
        }
        writes.withLock { tracking in
            let sequence = tracking.sequence + 1
            enqueue { [self] in
                let failure = store.commitUpload(upload)
                store.applied(digest)
                dequeued(digest, sequence: sequence)
                appliedOperations.add(1, ordering: .releasing)
                wakeWaiters()
                completion(failure)
            }
            Self.endWrite(&tracking, bucket: bucket)
            tracking.queued[digest] = QueuedOperation(expiry: upload.expiry, sequence: sequence)
        }
        return .queued
    }

    /// Queues the deletion of an upload given up (its client went away, or stopped sending parts).
    public func abortUpload(_ upload: CachetDiskUpload) {
        enqueue { upload.discard() }
    }

    /// Queues a read of part of a value (``CachetDiskStore/getRange(key:offset:length:limit:now:)``): its file
    /// is opened in order behind the writes queued before it, and its blocks read beside the queue.
    ///
    /// A key with no write or delete queued, and no CLEAR queued, skips the queue: every change to it that
    /// was acknowledged is applied already, so its file is opened and read beside the queue at once (one
    /// thread hop fewer for every range of a value that is not being written, as a video's are).
    public func getRange(
        key: [UInt8],
        offset: UInt64,
        length: UInt64,
        limit: Int,
        now: UInt32,
        completion: @escaping @Sendable (CachetDiskRange) -> Void
    ) {
        let digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        if writes.withLock({ $0.queued[digest] == nil && $0.clearsQueued == 0 }) {
            readers.async { [store] in
                completion(
                    store.getRange(key: key, digest: digest, offset: offset, length: length, limit: limit, now: now)
                )
            }
            return
        }
        enqueue { [store, readers] in
            switch store.openRange(key: key, digest: digest, offset: offset, length: length, limit: limit, now: now) {
            case .done(let result):
                completion(result)
            case .blocks(let reader):
                // Opened in order behind the writes queued before it; its blocks are read beside the queue,
                // so that ranges neither wait for each other nor hold up the writes behind them.
                readers.async { completion(store.finishRange(reader, reader.read())) }
            }
        }
    }

    /// Queues the opening of `key`'s whole value to be read a piece at a time (a GET answered in several
    /// frames): opened in order behind the writes queued before it, like a range.
    public func openValue(
        key: [UInt8],
        now: UInt32,
        completion: @escaping @Sendable (CachetDiskValueOpening) -> Void
    ) {
        enqueue { [store] in completion(store.openValue(key: key, now: now)) }
    }

    /// Reads `count` bytes from `start` of a value opened by ``openValue(key:now:completion:)``, beside the
    /// disk queue; nil when a block is damaged (its file is deleted) or the read fails. Read one piece of a
    /// value at a time.
    public func readPiece(
        of value: CachetDiskValuePieces,
        start: Int,
        count: Int,
        completion: @escaping @Sendable ([UInt8]?) -> Void
    ) {
        readers.async { [store] in completion(store.readPiece(of: value, start: start, count: count)) }
    }

    // MARK: Keeping disk reads from overwriting newer values in memory

    /// Call before a PUT or DEL changes the memory tier; ``submitPut(key:value:expiry:)`` (once it no
    /// longer answers `.full`), ``submitRemove(key:)`` or ``abandonWrite(key:)`` ends it.
    /// - Parameter key: the key.
    public func beginWrite(key: UnsafeRawBufferPointer) {
        let bucket = Self.bucket(key)
        writes.withLock { tracking in
            tracking.sequence += 1
            tracking.last[bucket] = tracking.sequence
            tracking.inFlight[bucket] += 1
        }
    }

    /// Ends a write begun with ``beginWrite(key:)`` that will not be submitted (refused before the disk
    /// queue, or its connection closed while it waited).
    /// - Parameter key: the key.
    public func abandonWrite(key: [UInt8]) {
        key.withUnsafeBytes { endWrite(bucket: Self.bucket($0)) }
    }

    private func endWrite(bucket: Int) {
        writes.withLock { Self.endWrite(&$0, bucket: bucket) }
    }

    private static func endWrite(_ tracking: inout WriteTracking, bucket: Int) {
        tracking.sequence += 1
        tracking.last[bucket] = tracking.sequence
        tracking.inFlight[bucket] = max(0, tracking.inFlight[bucket] - 1)
    }

    /// On the disk queue, once the operation queued at `sequence` is applied.
    private func dequeued(_ digest: KeyDigest, sequence: UInt64) {
        writes.withLock { tracking in
            if tracking.queued[digest]?.sequence == sequence { tracking.queued[digest] = nil }
        }
    }

    /// Whether the tier may hold a live value for `key` now, counting the writes, deletes and clears
    /// queued but not applied yet: the latest one queued for the key decides, else a queued CLEAR (the
    /// key is gone), else ``CachetDiskStore/contains(key:now:)``. A read of a key for which this is true
    /// must go through the disk queue (behind the queued writes); when false, the key is a miss now.
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the current time.
    public func mayHold(key: UnsafeRawBufferPointer, now: UInt32) -> Bool {
        let digest = KeyDigest(of: key)
        let queued: Bool? = writes.withLock { tracking in
            if let operation = tracking.queued[digest] {
                guard let expiry = operation.expiry else { return false }
                return !CachetClock.isExpired(expiry, now: now)
            }
            return tracking.clearsQueued > 0 ? false : nil
        }
        return queued ?? store.contains(digest: digest, now: now)
    }

    /// Call before a CLEAR empties the memory tier; ``removeAll(completion:)`` ends it.
    public func beginClear() {
        writes.withLock { tracking in
            tracking.sequence += 1
            tracking.lastClear = tracking.sequence
            tracking.clearsInFlight += 1
        }
    }

    /// After promoting an entry read by ``get(key:now:completion:)`` into memory: whether it may stay.
    /// False when a write, delete or clear of the key (or of one sharing its bucket) began after the read
    /// was queued or is still between its memory change and the disk queue: the promoted value may be
    /// older than one acknowledged meanwhile, and the caller must remove it again (a miss is harmless).
    /// - Parameters:
    ///   - key: the key.
    ///   - entry: what the read returned.
    public func mayKeepPromotion(key: UnsafeRawBufferPointer, of entry: CachetDiskEntry) -> Bool {
        let bucket = Self.bucket(key)
        return writes.withLock { tracking in
            tracking.inFlight[bucket] == 0 && tracking.last[bucket] <= entry.readTicket
                && tracking.clearsInFlight == 0 && tracking.lastClear <= entry.readTicket
        }
    }

    /// Queues a delete of everything, behind the writes already queued. Its completion comes after the
    /// files are gone, so a crash cannot undo an acknowledged CLEAR; when some file cannot be deleted and
    /// the journal cannot record that, the result's `failure` says the CLEAR must not be acknowledged.
    /// - Parameter completion: receives the entries and bytes deleted, on the disk queue.
    public func removeAll(completion: @escaping @Sendable (CachetDiskClearResult) -> Void) {
        writes.withLock { tracking in
            enqueue { [self] in
                let result = store.clear()
                writes.withLock { $0.clearsQueued -= 1 }
                completion(result)
            }
            tracking.sequence += 1
            tracking.lastClear = tracking.sequence
            tracking.clearsInFlight = max(0, tracking.clearsInFlight - 1)
            tracking.clearsQueued += 1
            // Whatever was queued before the CLEAR is gone once it runs.
            tracking.queued.removeAll(keepingCapacity: true)
        }
    }

    /// Queues a delete of the entries whose keys start with one of `prefixes` (a CLEAR limited to
    /// prefixes), behind the writes already queued; call ``beginClear()`` first, as for
    /// ``removeAll(completion:)``. Its completion comes after the files are gone.
    /// - Parameters:
    ///   - prefixes: the key prefixes.
    ///   - completion: receives the entries and bytes deleted, on the disk queue.
    public func removeAll(prefixes: [[UInt8]], completion: @escaping @Sendable (CachetDiskClearResult) -> Void) {
        writes.withLock { tracking in
            enqueue { [self] in completion(store.clear(prefixes: prefixes)) }
            // Reads queued before it must not put back what it deletes (``mayKeepPromotion(key:of:)``);
            // writes queued before it are deleted when it runs, so `mayHold` may still say yes: the read it
            // sends to the disk queue runs after the delete and misses.
            tracking.sequence += 1
            tracking.lastClear = tracking.sequence
            tracking.clearsInFlight = max(0, tracking.clearsInFlight - 1)
        }
    }

    /// Blocks until every queued operation has run.
    public func drain() {
        queue.sync {}
    }
}
