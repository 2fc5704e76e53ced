import CachetIO
import CachetStore

/// The commands every request comes down to, whatever protocol it arrived in: look up, store, delete and
/// clear keys in the memory tier and the disk tier behind it, with the leases and the WATCH changes they
/// imply. Knows no wire format: a front end (``RequestProcessor`` for the binary protocol) decodes a
/// request into a call here and encodes the outcome as its reply, so a second protocol reaches the store by
/// the same path.
///
/// One per event loop, called only on that loop's queue; what it holds is shared by every loop and
/// thread-safe.
struct NodeCommands {
    let store: CachetMemoryStore
    let disk: DiskTier?
    /// Values longer than this (`--large-value`) are never held whole in memory: kept on the disk tier
    /// only, and refused by a node without one.
    let largeValueThreshold: Int
    let counters: RequestCounters
    /// The leases of read-through, shared by every loop.
    let leases: NodeLeases
    /// The changes WATCH streams, shared by every loop.
    let watches: NodeWatchHub
    /// This loop's copy of the watched prefixes (read without a lock on the loop).
    let watchView: WatchIndexView
    /// Where items' CAS uniques come from, shared by every loop.
    let casSource: CachetCASSource

    /// What a look-up in memory came to.
    enum Lookup {
        /// Found; `found` wrote the reply.
        case hit
        /// Found, but `found` had no room for the reply: nothing was counted, ask again later.
        case noRoom
        /// Not in memory (it may be on disk: ``afterMemoryMiss(_:now:)``).
        case miss
    }

    /// Looks `key` up in memory and hands a live value and its expiry to `found` under the shard's lock (the
    /// value is valid only there, so the reply is written without a copy); counts a GET, and a hit.
    /// - Parameter found: writes the reply; returns false when the reply does not fit the memory the
    ///   connection may take (the GET is then not counted). Generic, as the store's `withValue` is, so that
    ///   a closure written at the call site reaches the store as it is, with no thunk between.
    @inline(__always)
    func lookUp<Written: ExpressibleByBooleanLiteral & Equatable>(
        _ key: UnsafeRawBufferPointer,
        now: UInt32,
        _ found: (UnsafeRawBufferPointer, UInt32) -> Written
    ) -> Lookup {
        let hit = store.withValue(forKey: key, now: now, found)
        guard let hit else {
            RequestCounters.bump(counters.gets)
            return .miss
        }
        guard hit == true else { return .noRoom }
        RequestCounters.bump(counters.gets)
        RequestCounters.bump(counters.hits)
        return .hit
    }

    /// Whether a key memory missed is to be read from the disk tier: only when the tier may hold it,
    /// counting the writes queued but not applied (the serial queue then answers after them, in order).
    /// Counts a miss when it is not.
    @inline(__always)
    func afterMemoryMiss(_ key: UnsafeRawBufferPointer, now: UInt32) -> Bool {
        if let disk, disk.worker.mayHold(key: key, now: now) { return true }
        RequestCounters.bump(counters.misses)
        return false
    }

    /// The lease a GET with the `lease` flag gets on a miss (`Protocol/PROTOCOL.md`, "Leases").
    func acquireLease(_ key: UnsafeRawBufferPointer) -> NodeLeases.Grant {
        leases.acquire(key)
    }

    /// What a PUT came to. The cases with a payload are rare and boxed (`indirect`), so that the common one
    /// is a word to return and nothing to destroy.
    enum PutOutcome {
        /// Stored (and its disk write queued, on a node with a disk tier).
        case stored
        /// Stored in memory; its disk write waits for room in the bounded disk queue (acknowledged once it
        /// is queued).
        indirect case waitingForDisk(key: [UInt8], value: [UInt8], expiry: UInt32)
        /// Too large for either tier (the message says which limits).
        indirect case tooLarge(String)
        /// The disk journal could not record it; it is not stored.
        indirect case failed(CachetStoreError)
    }

    /// Stores `value` under `key` for `ttl` seconds (0: no TTL): in memory, written through to the disk tier.
    /// - Parameter invalidatingLease: whether the write ends a lease on the key (false for the write that
    ///   completes the lease).
    @inline(__always)
    func put(
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        ttl: UInt32,
        now: UInt32,
        invalidatingLease: Bool = true
    ) -> PutOutcome {
        RequestCounters.bump(counters.puts)
        let expiry = Self.expiry(ttl: ttl, now: now)
        // Before the store changes: a lease granted before this write must not store a value loaded before it.
        if invalidatingLease { leases.invalidate(key) }
        // A node with a disk tier takes the longer way, apart so that a node without one inlines only this.
        if let disk { return putThrough(disk, key: key, value: value, ttl: ttl, expiry: expiry, now: now) }
        guard value.count <= largeValueThreshold else { return .tooLarge(tooLargeWithoutDisk(value.count)) }
        guard store.put(key: key, value: value, expiry: expiry, now: now) == .stored else {
            return .tooLarge(tooLargeForMemory(key.count + value.count))
        }
        watches.publish(.put, key: key, value: value, ttl: ttl, view: watchView)
        return .stored
    }

    /// Why an entry of `bytes` bytes of key and value was refused on a node without a disk tier.
    private func tooLargeForMemory(_ bytes: Int) -> String {
        "entry of \(bytes) bytes does not fit --memory-limit \(store.statistics.memoryLimit)"
    }

    /// Why a value of `length` bytes was refused on a node without a disk tier.
    func tooLargeWithoutDisk(_ length: Int) -> String {
        "a value of \(length) bytes is longer than --large-value \(largeValueThreshold): a node without a disk tier"
            + " holds none longer in memory (values longer are kept on a disk tier, never whole in memory)"
    }

    /// ``put(key:value:ttl:now:invalidatingLease:)`` on a node with a disk tier: in memory (or on disk only,
    /// when memory cannot hold it), the disk write queued.
    private func putThrough(
        _ disk: DiskTier,
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        ttl: UInt32,
        expiry: UInt32,
        now: UInt32
    ) -> PutOutcome {
        // Before memory changes, so that a disk read queued earlier does not put the older value back.
        disk.worker.beginWrite(key: key)
        var diskOnly = false
        if value.count > largeValueThreshold
            || store.put(key: key, value: value, expiry: expiry, now: now) == .tooLarge
        {
            diskOnly = true
            // The disk limit must also hold the entry file's header, even for an incompressible value.
            guard key.count + value.count <= disk.store.maximumEntryBytes else {
                disk.worker.abandonWrite(key: Array(key))
                return .tooLarge(
                    tooLargeForMemory(key.count + value.count)
                        + " nor --disk-limit \(disk.limit) (at most \(disk.store.maximumEntryBytes) bytes of key and value)"
                )
            }
            // Stored on disk only; an older copy in memory must not shadow it.
            _ = store.remove(key: key, now: now)
        }
        let keyBytes = Array(key)
        let valueBytes = Array(value)
        switch disk.worker.submitPut(key: keyBytes, value: valueBytes, expiry: expiry) {
        case .queued:
            // A write of the key another loop put in memory, and queued before this one, must not shadow it.
            if diskOnly { _ = store.remove(key: key, now: now) }
            watches.publish(.put, key: key, value: value, ttl: ttl, view: watchView)
            return .stored
        case .full:
            watches.publish(.put, key: key, value: value, ttl: ttl, view: watchView)
            return .waitingForDisk(key: keyBytes, value: valueBytes, expiry: expiry)
        case .refused(let error):
            forgetRefusedPut(key: keyBytes, now: now)
            return .failed(error)
        }
    }

    /// Before a value kept on disk only (sent in parts) replaces `key`'s: counted as a PUT, a lease on the
    /// key ended, the disk queue told of the write, and the older value out of memory, so that a read goes
    /// to the disk queue, behind the write.
    func prepareLargeWrite(_ key: UnsafeRawBufferPointer) {
        RequestCounters.bump(counters.puts)
        leases.invalidate(key)
        disk?.worker.beginWrite(key: key)
        _ = store.remove(key: key, now: CachetClock.now())
    }

    /// Takes `key` out of memory (not out of the disk tier): once a write kept on disk only is queued, any
    /// copy in memory is of a write queued before it.
    func dropMemoryCopy(_ key: UnsafeRawBufferPointer) {
        _ = store.remove(key: key, now: CachetClock.now())
    }

    /// Once a PUT that waited for room in the disk queue is queued: memory keeps `key` only if it still
    /// holds this PUT's value. A write of the key that another connection stored in memory and queued while
    /// this one waited went to the disk queue first, so this one is the newer; the older copy must go (a
    /// read then goes to the disk queue, behind both).
    func keepMemoryCopy(_ key: [UInt8], onlyIf value: [UInt8]) {
        key.withUnsafeBytes { key in
            let same = store.withValue(forKey: key, now: CachetClock.now(), marking: false) { held, _ in
                held.elementsEqual(value)
            }
            if same != true { _ = store.remove(key: key, now: CachetClock.now()) }
        }
    }

    /// Once a value kept on disk only is stored: the WATCH change, its value omitted.
    func publishLargeWrite(_ key: UnsafeRawBufferPointer, ttl: UInt32) {
        watches.publish(.put, key: key, ttl: ttl, omittingValue: true, view: watchView)
    }

    /// A PUT with a lease token: stored by `store` while its lease stands; nil (not stored) otherwise.
    func completeLease<Result>(
        _ key: UnsafeRawBufferPointer,
        token: UInt64,
        store: () -> Result
    ) -> Result? {
        leases.complete(key, token: token, store: store)
    }

    /// Takes back a PUT the disk journal could not record: the new value leaves memory too, so that what is
    /// served stays what was last acknowledged.
    func forgetRefusedPut(key: [UInt8], now: UInt32) {
        _ = key.withUnsafeBytes { store.remove(key: $0, now: now) }
    }

    /// What a DEL came to.
    enum DeleteOutcome {
        /// The key had a value (in memory, or possibly on disk).
        case deleted
        /// It had none.
        case notFound
        /// The disk journal could not record the removal.
        case failed(CachetStoreError)
    }

    /// Deletes `key` from both tiers.
    func delete(_ key: UnsafeRawBufferPointer, now: UInt32) -> DeleteOutcome {
        RequestCounters.bump(counters.deletes)
        leases.invalidate(key)
        disk?.worker.beginWrite(key: key)
        var removed = store.remove(key: key, now: now)
        if let disk {
            // Before the delete is queued: counts the writes and deletes of the key still queued.
            removed = disk.worker.mayHold(key: key, now: now) || removed
            if case .refused(let error) = disk.worker.submitRemove(key: Array(key)) { return .failed(error) }
        }
        if removed { watches.publish(.delete, key: key, view: watchView) }
        return removed ? .deleted : .notFound
    }

    /// What a CLEAR came to.
    enum ClearOutcome {
        /// Done: what was removed.
        case cleared(items: Int, bytes: Int)
        /// Memory is empty (of the keys under the prefixes); the disk tier empties behind the queued
        /// writes, and the reply counts what it removed plus the entries only memory held.
        case waitingForDisk(memoryOnlyItems: Int, memoryOnlyBytes: Int)
    }

    /// Clears every key, or the keys under `prefixes` when there are any.
    func clear(prefixes: [[UInt8]]) -> ClearOutcome {
        leases.invalidateAll()
        if prefixes.isEmpty {
            watches.publishClear(prefix: [])
        } else {
            for prefix in prefixes { watches.publishClear(prefix: prefix) }
        }
        guard let disk else {
            let removed = prefixes.isEmpty ? store.removeAll() : store.removeAll(prefixes: prefixes)
            return .cleared(items: removed.items, bytes: removed.bytes)
        }
        // Entries are written through to disk, so the disk's count covers memory's, including entries
        // whose write is still queued (queued before this CLEAR, it lands before the CLEAR runs); an entry
        // the disk will not hold (its write failed or was refused) is counted from memory.
        var memoryOnlyItems = 0
        var memoryOnlyBytes = 0
        let now = CachetClock.now()
        disk.worker.beginClear()
        let visit: (UnsafeRawBufferPointer, Int) -> Void = { key, valueLength in
            if !disk.worker.mayHold(key: key, now: now) {
                memoryOnlyItems += 1
                memoryOnlyBytes += key.count + valueLength
            }
        }
        if prefixes.isEmpty {
            _ = store.removeAll(visit: visit)
        } else {
            _ = store.removeAll(prefixes: prefixes, visit: visit)
        }
        return .waitingForDisk(memoryOnlyItems: memoryOnlyItems, memoryOnlyBytes: memoryOnlyBytes)
    }

    /// Keeps a value read from the disk tier in memory, unless a PUT or DEL of the key since the read was
    /// queued has replaced it; counts the hit.
    func promote(_ key: UnsafeRawBufferPointer, _ entry: CachetDiskEntry, now: UInt32) {
        RequestCounters.bump(counters.hits)
        RequestCounters.bump(counters.diskHits)
        // A large value stays on disk only.
        if entry.value.count > largeValueThreshold { return }
        entry.value.withUnsafeBytes { value in
            _ = store.put(key: key, value: value, expiry: entry.expiry, now: now, fields: entry.fields)
        }
        if let disk, !disk.worker.mayKeepPromotion(key: key, of: entry) {
            _ = store.remove(key: key, now: now)
        }
    }

    /// Removes this node's copy of `key` (memory, and the disk tier through its queue), and ends a lease on
    /// it. Returns why the disk tier could not record the removal, when it could not.
    func dropCopy(_ key: UnsafeRawBufferPointer) -> String? {
        // As any write of the key: a lease granted before must not store a value loaded before it.
        leases.invalidate(key)
        disk?.worker.beginWrite(key: key)
        _ = store.remove(key: key, now: CachetClock.now())
        guard let disk else { return nil }
        if case .refused(let error) = disk.worker.submitRemove(key: Array(key)) { return error.message }
        return nil
    }

    /// Removes this node's copies of `keys`; removals the disk queue cannot take are skipped (for copies
    /// that are dead whatever happens to them).
    func dropCopies(_ keys: [[UInt8]]) {
        for key in keys { _ = key.withUnsafeBytes { dropCopy($0) } }
    }

    /// The memory tier's live value of `key` and its TTL left in whole seconds (0 for none); nil when memory
    /// holds none.
    func memoryValue(_ key: [UInt8]) -> (value: [UInt8], ttl: UInt32)? {
        let now = CachetClock.now()
        return key.withUnsafeBytes { key in
            store.withValue(forKey: key, now: now, marking: false) { value, expiry -> (value: [UInt8], ttl: UInt32)? in
                guard expiry == 0 || expiry > now else { return nil }
                return (Array(value), expiry == 0 ? 0 : expiry - now)
            } ?? nil
        }
    }

    /// Reserves a memory entry for a PUT whose value is to be received in place (``DirectPut``): only on a
    /// node without a disk tier (which copies every write), for an entry that fits the memory limit. Ends a
    /// lease on the key.
    func reserveDirectPut(
        _ key: UnsafeRawBufferPointer,
        valueLength: Int,
        ttl: UInt32,
        now: UInt32
    ) -> CachetPendingPut? {
        guard disk == nil, valueLength <= largeValueThreshold else { return nil }
        leases.invalidate(key)
        return store.reservePut(key: key, valueLength: valueLength, expiry: Self.expiry(ttl: ttl, now: now))
    }

    /// Stores a PUT received in place.
    func commitDirectPut(_ put: DirectPut, now: UInt32) {
        guard let pending = put.pending else { return }
        RequestCounters.bump(counters.puts)
        watches.publish(
            .put,
            key: pending.key,
            value: UnsafeRawBufferPointer(pending.value),
            ttl: put.ttl,
            view: watchView
        )
        store.commit(pending, now: now)
    }

    /// The absolute expiry for a TTL: 0 stays 0 (never), otherwise now + ttl, saturating.
    static func expiry(ttl: UInt32, now: UInt32) -> UInt32 {
        guard ttl > 0 else { return 0 }
        let (sum, overflow) = now.addingReportingOverflow(ttl)
        return overflow ? UInt32.max : sum
    }
}
