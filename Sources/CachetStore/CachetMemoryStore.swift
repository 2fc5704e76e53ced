import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// How a memory tier is sized and split.
public struct CachetMemoryStoreConfiguration: Sendable {
    /// Bytes the tier may hold, counting each entry's heap chunk and table slot, not only its payload.
    public var memoryLimit: Int
    /// Shards, each with its own lock; a power of two.
    public var shardCount: Int

    /// Creates a configuration.
    /// - Parameters:
    ///   - memoryLimit: the byte limit.
    ///   - shardCount: a power of two; 16 by default.
    public init(memoryLimit: Int, shardCount: Int = 16) {
        self.memoryLimit = memoryLimit
        self.shardCount = shardCount
    }
}

/// What a PUT into memory did.
public enum CachetPutOutcome: Sendable, Equatable {
    /// The entry is stored (least recently used entries may have been evicted for it).
    case stored
    /// The entry alone is larger than the whole limit; nothing changed.
    case tooLarge
}

/// Counters of the memory tier.
public struct CachetMemoryStatistics: Sendable, Equatable {
    /// Live and not yet swept entries.
    public var items: Int
    /// Key and value bytes of those entries.
    public var keyValueBytes: Int
    /// Bytes counted against the limit (payload, entry header, allocator chunk, table slot).
    public var accountedBytes: Int
    /// The byte limit.
    public var memoryLimit: Int
    /// Entries removed to make room.
    public var evictions: Int
    /// Entries removed because their TTL had passed.
    public var expired: Int
    /// Bytes of freed large entries (64 KiB and more) kept for reuse by later large entries: resident,
    /// but not counted in `accountedBytes`; at most a sixteenth of the limit, and 64 MiB.
    public var pooledBytes: Int
}

/// The memory tier: a byte-limited, sharded LRU with TTLs.
///
/// Each entry is one `malloc` block (header, key, value) linked into its shard's LRU list and indexed by
/// an open-addressing table, so an entry costs its heap chunk and about one table slot and nothing else
/// (see `MemoryEntry`). Keys map to shards by hash; each shard has its own lock, and the byte limit is
/// global: a PUT evicts from its own shard's LRU end first, then from the others', one lock at a time.
/// Each shard's order is exact LRU; across shards it approximates global LRU, as memcached's per-class
/// LRUs do.
///
/// Thread-safe. `@unchecked Sendable`: every shard is reached only while holding that shard's lock.
public final class CachetMemoryStore: @unchecked Sendable {
    private let shards: [MemoryShard]
    private let locks: UnsafeMutablePointer<pthread_mutex_t>
    private let shardShift: UInt64
    private let seed: UInt64
    private let used = Atomic<Int>(0)
    private let victimCursor = Atomic<Int>(0)
    /// Keeps freed large blocks for reuse; its free bytes are outside `memoryLimit` (see ``pooledBytes``).
    private let pool: LargeBlockPool
    /// The byte limit.
    public var memoryLimit: Int { limit.load(ordering: .relaxed) }
    /// The byte limit, changed at run time by ``setMemoryLimit(_:)``.
    private let limit: Atomic<Int>

    /// The longest key an entry can hold (the protocol allows 4096 bytes).
    public static let maximumKeyLength = MemoryEntry.maximumKeyLength

    /// Creates an empty tier.
    /// - Parameters:
    ///   - configuration: the limit and shard count.
    ///   - observer: told of each entry that expires (found expired, or swept) or is evicted, with its
    ///     key, under the shard's lock: it must be quick and must not call back into the store.
    public init(configuration: CachetMemoryStoreConfiguration, observer: CachetRemovalObserver? = nil) {
        precondition(configuration.shardCount > 0 && configuration.shardCount & (configuration.shardCount - 1) == 0)
        limit = Atomic(configuration.memoryLimit)
        let pool = LargeBlockPool(limit: LargeBlockPool.defaultLimit(memoryLimit: configuration.memoryLimit))
        self.pool = pool
        shards = (0..<configuration.shardCount).map { _ in MemoryShard(pool: pool, observer: observer) }
        locks = .allocate(capacity: configuration.shardCount)
        for i in 0..<configuration.shardCount { pthread_mutex_init(locks + i, nil) }
        shardShift = UInt64(64 - configuration.shardCount.trailingZeroBitCount)
        seed = UInt64.random(in: 0...UInt64.max)
    }

    deinit {
        for i in 0..<shards.count { pthread_mutex_destroy(locks + i) }
        locks.deallocate()
    }

    @inline(__always)
    private func shardIndex(_ hash: UInt64) -> Int {
        shardShift == 64 ? 0 : Int(truncatingIfNeeded: hash >> shardShift)
    }

    /// Calls `body` with shard `index` under its lock. The shard is passed without a retain (a retain and
    /// release per GET or PUT cost measurably: BENCHMARKS.md, "Figures behind choices in the code"):
    /// `shards` holds every shard for the store's lifetime, and `self` is alive for the call.
    @inline(__always)
    private func withShard<R>(_ index: Int, _ body: (MemoryShard) throws -> R) rethrows -> R {
        pthread_mutex_lock(locks + index)
        defer { pthread_mutex_unlock(locks + index) }
        return try Unmanaged.passUnretained(shards[index])._withUnsafeGuaranteedRef(body)
    }

    /// Stores a copy of `key` and `value`, replacing an older entry, evicting least recently used entries
    /// until the tier is within its limit.
    ///
    /// - Parameters:
    ///   - key: 1 to ``maximumKeyLength`` bytes.
    ///   - value: the value bytes.
    ///   - expiry: absolute ``CachetClock`` seconds, 0 for never.
    ///   - now: the current time.
    /// - Returns: ``CachetPutOutcome/tooLarge`` when the entry alone exceeds the limit.
    /// - Complexity: O(1) on average, plus one step per evicted entry.
    @discardableResult
    public func put(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, expiry: UInt32, now: UInt32)
        -> CachetPutOutcome
    {
        // Apart from the one with fields, so that a plain PUT's path has no branch on them.
        storeEntry(key: key, value: value, expiry: expiry, now: now, fields: nil)
    }

    /// ``put(key:value:expiry:now:)`` with the item fields to keep with the entry (nil: none).
    @discardableResult
    public func put(
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        expiry: UInt32,
        now: UInt32,
        fields: CachetItemFields?
    ) -> CachetPutOutcome {
        storeEntry(key: key, value: value, expiry: expiry, now: now, fields: fields)
    }

    @inline(__always)
    private func storeEntry(
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        expiry: UInt32,
        now: UInt32,
        fields: CachetItemFields?
    ) -> CachetPutOutcome {
        let fieldsSize = fields == nil ? 0 : CachetItemFields.storedSize
        guard
            MemoryEntry.accountedSize(keyLength: key.count, valueLength: value.count, fieldsSize: fieldsSize)
                <= memoryLimit,
            key.count <= Self.maximumKeyLength
        else { return .tooLarge }
        let hash = CachetHash.hash(key, seed: seed)
        let index = shardIndex(hash)
        withShard(index) { shard in
            settle(
                shard,
                delta: shard.insert(key: key, value: value, hash: hash, expiry: expiry, fields: fields, now: now)
            )
        }
        if used.load(ordering: .relaxed) > memoryLimit { evictFromOtherShards(than: index) }
        return .stored
    }

    /// Changes the byte limit while the store serves (memcached's `cache_memlimit`): a lower one evicts
    /// least recently used entries, shard by shard, until the tier is within it.
    /// - Parameter bytes: the new limit, at least 1.
    public func setMemoryLimit(_ bytes: Int) {
        limit.store(max(1, bytes), ordering: .relaxed)
        if used.load(ordering: .relaxed) > memoryLimit { evictFromOtherShards(than: -1) }
    }

    /// Counts a just-inserted entry's bytes and evicts from its shard (never the new entry) until the tier
    /// is within its limit or the shard has nothing else. Called with the shard's lock held.
    @inline(__always)
    private func settle(_ shard: MemoryShard, delta: Int) {
        var total = used.add(delta, ordering: .relaxed).newValue
        let inserted = shard.mostRecent
        while total > memoryLimit {
            let freed = shard.evictOne(keeping: inserted)
            if freed == 0 { break }
            total = used.subtract(freed, ordering: .relaxed).newValue
        }
    }

    /// Starts a PUT whose value is written in place later, without a copy: allocates the entry with its key
    /// and room for `valueLength` bytes, outside any lock. Fill ``CachetPendingPut/value``, then call
    /// ``commit(_:now:)``; a pending PUT that is never committed frees its memory when released, and the
    /// store never sees it. The entry's bytes count against the limit only once committed.
    ///
    /// - Parameters:
    ///   - key: 1 to ``maximumKeyLength`` bytes.
    ///   - valueLength: the value's length in bytes.
    ///   - expiry: absolute ``CachetClock`` seconds, 0 for never.
    /// - Returns: the pending PUT, or nil when the entry alone would exceed the limit.
    /// - Complexity: O(n) in the key's length (it is hashed and copied).
    public func reservePut(key: UnsafeRawBufferPointer, valueLength: Int, expiry: UInt32) -> CachetPendingPut? {
        guard MemoryEntry.accountedSize(keyLength: key.count, valueLength: valueLength) <= memoryLimit,
            key.count > 0, key.count <= Self.maximumKeyLength, valueLength >= 0, valueLength <= Int(UInt32.max)
        else { return nil }
        let hash = CachetHash.hash(key, seed: seed)
        return CachetPendingPut(
            MemoryEntry.makeUnfilled(key: key, valueLength: valueLength, hash: hash, expiry: expiry, pool: pool),
            pool: pool
        )
    }

    /// Stores a pending PUT's entry, replacing an older one with the same key and evicting as ``put(key:value:expiry:now:)``
    /// does. The pending PUT is empty afterwards; committing it again does nothing.
    ///
    /// - Parameters:
    ///   - pending: a PUT from ``reservePut(key:valueLength:expiry:)`` whose value has been written.
    ///   - now: the current time.
    /// - Returns: ``CachetPutOutcome/stored``, or ``CachetPutOutcome/tooLarge`` for an empty pending PUT.
    /// - Complexity: O(1) on average, plus one step per evicted entry.
    @discardableResult
    public func commit(_ pending: CachetPendingPut, now: UInt32) -> CachetPutOutcome {
        guard let entry = pending.take() else { return .tooLarge }
        let index = shardIndex(entry.hash)
        withShard(index) { shard in settle(shard, delta: shard.insert(entry)) }
        if used.load(ordering: .relaxed) > memoryLimit { evictFromOtherShards(than: index) }
        return .stored
    }

    /// Evicts from other shards, one lock at a time, until the tier is within its limit.
    private func evictFromOtherShards(than own: Int) {
        let start = victimCursor.add(1, ordering: .relaxed).newValue
        for step in 0..<shards.count {
            let index = (start + step) % shards.count
            if index == own { continue }
            let done: Bool = withShard(index) { shard in
                while used.load(ordering: .relaxed) > memoryLimit {
                    let freed = shard.evictOne()
                    if freed == 0 { return false }
                    used.subtract(freed, ordering: .relaxed)
                }
                return true
            }
            if done { return }
        }
    }

    /// Looks `key` up and, on a live hit, marks it most recently used and calls `body` with the value and
    /// its expiry while the shard's lock is held (so copy the bytes out; do not keep the pointer).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the current time; an expired entry is removed and counted, and reads as a miss.
    ///   - body: reads the value.
    /// - Returns: `body`'s result, or nil on a miss.
    /// - Complexity: O(1) on average.
    ///   - marking: whether this is a client's read, which marks the entry (for the LRU, as hit, its access
    ///     time); the node's own look-ups (is it held, is it the same value) pass false.
    public func withValue<R>(
        forKey key: UnsafeRawBufferPointer,
        now: UInt32,
        marking: Bool = true,
        _ body: (UnsafeRawBufferPointer, UInt32) -> R
    ) -> R? {
        withLiveEntry(forKey: key, now: now, marking: marking) { body($0.value, $0.expiry) }
    }

    /// Looks `key` up and calls `body` with its live entry under the shard's lock (the look-up of
    /// ``withValue(forKey:now:_:)`` and ``withItem(forKey:now:_:)``).
    @inline(__always)
    private func withLiveEntry<R>(
        forKey key: UnsafeRawBufferPointer,
        now: UInt32,
        marking: Bool = true,
        _ body: (MemoryEntry) -> R
    ) -> R? {
        let hash = CachetHash.hash(key, seed: seed)
        return withShard(shardIndex(hash)) { shard in
            let (entry, freed) = shard.lookup(key, hash: hash, now: now, marking: marking)
            if freed > 0 { used.subtract(freed, ordering: .relaxed) }
            guard let entry else { return nil }
            return body(entry)
        }
    }

    /// ``withValue(forKey:now:marking:_:)`` with the entry's item fields too (nil for an entry without them).
    public func withItem<R>(
        forKey key: UnsafeRawBufferPointer,
        now: UInt32,
        marking: Bool = true,
        _ body: (UnsafeRawBufferPointer, UInt32, CachetItemFields?) -> R
    ) -> R? {
        withLiveEntry(forKey: key, now: now, marking: marking) { body($0.value, $0.expiry, $0.fields) }
    }

    /// ``withItem(forKey:now:_:)`` for a body that says whether it used the item (a retrieval writing its
    /// reply): not generic, so that a caller in another module does not pay for a generic result (value
    /// witness calls) on every key it reads.
    /// - Returns: `body`'s answer; nil on a miss.
    public func readItem(
        forKey key: UnsafeRawBufferPointer,
        now: UInt32,
        _ body: (UnsafeRawBufferPointer, CachetItemFields?) -> Bool
    ) -> Bool? {
        withLiveEntry(forKey: key, now: now) { body($0.value, $0.fields) }
    }

    /// ``withItemGivingCAS(forKey:now:cas:_:)`` for a body that says whether it used the item, not generic
    /// (see ``readItem(forKey:now:_:)``).
    public func readItemGivingCAS(
        forKey key: UnsafeRawBufferPointer,
        now: UInt32,
        cas: () -> UInt64,
        _ body: (UnsafeRawBufferPointer, CachetItemFields) -> Bool
    ) -> Bool? {
        withItemGivingCAS(forKey: key, now: now, cas: cas) { value, _, fields in body(value, fields) }
    }

    /// Reads `key`'s live entry and replaces it in one step under its shard's lock, so that no write of the
    /// key comes between (memcached's conditional and arithmetic commands). `decide` sees the entry (nil on a
    /// miss; the value is valid only inside it) and says what to store, and what to return.
    /// - Returns: `decide`'s result, and the store's outcome when it stored (``CachetPutOutcome/tooLarge``,
    ///   storing nothing, for an entry over the limit); nil when it kept the entry.
    ///   - keepingReadState: the entry stored anew keeps the marks of the one it replaces (whether it was
    ///     read, for `mg h`, and for the LRU): a touch, which memcached does in place.
    ///   - markingRead: the entry stored is marked read (a get-and-touch).
    public func update<R>(
        forKey key: UnsafeRawBufferPointer,
        now: UInt32,
        keepingReadState: Bool = false,
        markingRead: Bool = false,
        _ decide: (CachetMemoryItem?) -> (CachetItemUpdate, R)
    ) -> (R, CachetPutOutcome?) {
        let hash = CachetHash.hash(key, seed: seed)
        let index = shardIndex(hash)
        let (result, outcome): (R, CachetPutOutcome?) = withShard(index) { shard in
            // A write does not count as a read of the item it replaces (as memcached's stores do not).
            let (found, freed) = shard.lookup(key, hash: hash, now: now, marking: false)
            if freed > 0 { used.subtract(freed, ordering: .relaxed) }
            let (update, result) = decide(
                found.map { CachetMemoryItem(value: $0.value, expiry: $0.expiry, fields: $0.fields) }
            )
            if case .remove = update {
                let (_, freed) = shard.remove(key, hash: hash, now: now)
                if freed > 0 { used.subtract(freed, ordering: .relaxed) }
                return (result, nil)
            }
            guard case .store(let value, let expiry, let fields) = update else { return (result, nil) }
            let size = MemoryEntry.accountedSize(
                keyLength: key.count,
                valueLength: value.count,
                fieldsSize: fields == nil ? 0 : CachetItemFields.storedSize
            )
            guard size <= memoryLimit, key.count <= Self.maximumKeyLength else { return (result, .tooLarge) }
            // Read before the insert frees the entry it replaces.
            let kept = keepingReadState ? found.map { (fetched: $0.fetched, referenced: $0.referenced) } : nil
            value.withUnsafeBytes { value in
                settle(
                    shard,
                    delta: shard.insert(key: key, value: value, hash: hash, expiry: expiry, fields: fields, now: now)
                )
            }
            if kept != nil || markingRead, let stored = shard.lookup(key, hash: hash, now: now, marking: false).entry {
                if let kept {
                    stored.fetched = kept.fetched
                    stored.referenced = kept.referenced
                }
                if markingRead { stored.markRead() }
            }
            return (result, .stored)
        }
        if outcome == .stored, used.load(ordering: .relaxed) > memoryLimit { evictFromOtherShards(than: index) }
        return (result, outcome)
    }

    /// Gives `key`'s live entry a CAS unique if it has none (an entry written without item fields, read by a
    /// client that asks for its CAS): the entry is stored again with flags 0 and `cas`, under the shard's
    /// lock, so a write between the read and this sees the new unique. Calls `body` with the value, expiry
    /// and fields, as ``withItem(forKey:now:_:)`` does; nil on a miss.
    public func withItemGivingCAS<R>(
        forKey key: UnsafeRawBufferPointer,
        now: UInt32,
        cas: () -> UInt64,
        _ body: (UnsafeRawBufferPointer, UInt32, CachetItemFields) -> R
    ) -> R? {
        withItemForMetaGet(forKey: key, now: now, cas: cas, marking: true) { value, expiry, fields, _ in
            body(value, expiry, fields)
        }
    }

    /// memcached's meta get of `key`: ``withItemGivingCAS(forKey:now:cas:_:)``, with what `mg h` and `mg l`
    /// report (``CachetMetaRead``), the item marked as read (for the LRU, as hit, its access time) only when
    /// `marking` (`mg u` asks for none of it).
    public func withItemForMetaGet<R>(
        forKey key: UnsafeRawBufferPointer,
        now: UInt32,
        cas: () -> UInt64,
        marking: Bool,
        _ body: (UnsafeRawBufferPointer, UInt32, CachetItemFields, CachetMetaRead) -> R
    ) -> R? {
        let hash = CachetHash.hash(key, seed: seed)
        let index = shardIndex(hash)
        let result: R? = withShard(index) { shard in
            let (found, freed) = shard.lookup(key, hash: hash, now: now, marking: false)
            if freed > 0 { used.subtract(freed, ordering: .relaxed) }
            guard let entry = found else { return nil }
            let hitBefore = entry.fetched
            if let fields = entry.fields {
                if marking {
                    entry.markRead()
                    entry.noteAccess(now: now)
                }
                return body(entry.value, entry.expiry, fields, CachetMetaRead(entry, hitBefore: hitBefore, now: now))
            }
            let fields = CachetItemFields(flags: 0, cas: cas())
            let replacement = MemoryEntry.make(
                key: entry.key,
                value: entry.value,
                hash: hash,
                expiry: entry.expiry,
                fields: fields,
                accessed: entry.accessed,
                pool: pool
            )
            if marking {
                replacement.markRead()
                replacement.noteAccess(now: now)
            } else {
                replacement.referenced = entry.referenced
                replacement.fetched = hitBefore
            }
            settle(shard, delta: shard.insert(replacement))
            let read = CachetMetaRead(replacement, hitBefore: hitBefore, now: now)
            return body(replacement.value, replacement.expiry, fields, read)
        }
        if used.load(ordering: .relaxed) > memoryLimit { evictFromOtherShards(than: index) }
        return result
    }

    /// Whether `key`'s live entry had been read since it was stored (`mg h`), marking it read when
    /// `marking`; nil on a miss. For a meta get that touches: asked before the touch (which stores the
    /// entry anew), and marked after it.
    public func readState(forKey key: UnsafeRawBufferPointer, now: UInt32, marking: Bool) -> Bool? {
        withLiveEntry(forKey: key, now: now, marking: false) { entry in
            let before = entry.fetched
            if marking {
                entry.markRead()
                entry.noteAccess(now: now)
            }
            return before
        }
    }

    /// Removes `key`.
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the current time.
    /// - Returns: true when a live entry was removed (an expired one is removed too, but reads as absent).
    /// - Complexity: O(1) on average.
    @discardableResult
    public func remove(key: UnsafeRawBufferPointer, now: UInt32) -> Bool {
        let hash = CachetHash.hash(key, seed: seed)
        return withShard(shardIndex(hash)) { shard in
            let (removed, freed) = shard.remove(key, hash: hash, now: now)
            if freed > 0 { used.subtract(freed, ordering: .relaxed) }
            return removed
        }
    }

    /// Removes every entry.
    /// - Parameter visit: called with each removed key and its value's length, under the shard's lock.
    /// - Returns: entries removed and their key and value bytes.
    /// - Complexity: O(n).
    @discardableResult
    public func removeAll(visit: ((UnsafeRawBufferPointer, Int) -> Void)? = nil) -> (items: Int, bytes: Int) {
        var items = 0
        var bytes = 0
        for index in shards.indices {
            withShard(index) { shard in
                let removed = shard.removeAll(visit: visit)
                items += removed.items
                bytes += removed.payloadBytes
                used.subtract(removed.accountedBytes, ordering: .relaxed)
            }
        }
        return (items, bytes)
    }

    /// Removes the entries whose keys start with one of `prefixes` (a CLEAR limited to prefixes).
    /// - Parameters:
    ///   - prefixes: the key prefixes; an empty list removes nothing.
    ///   - visit: called with each removed key and its value's length, under the shard's lock.
    /// - Returns: entries removed and their key and value bytes.
    /// - Complexity: O(n), n the entries of the whole tier.
    @discardableResult
    public func removeAll(
        prefixes: [[UInt8]],
        visit: ((UnsafeRawBufferPointer, Int) -> Void)? = nil
    ) -> (items: Int, bytes: Int) {
        var items = 0
        var bytes = 0
        guard !prefixes.isEmpty else { return (0, 0) }
        for index in shards.indices {
            withShard(index) { shard in
                let removed = shard.removeAll(prefixes: prefixes, visit: visit)
                items += removed.items
                bytes += removed.payloadBytes
                used.subtract(removed.accountedBytes, ordering: .relaxed)
            }
        }
        return (items, bytes)
    }

    /// Removes expired entries incrementally: examines at most `budget` entries per shard, resuming where
    /// the previous call stopped.
    /// - Parameters:
    ///   - now: the current time.
    ///   - budget: entries examined per shard.
    /// - Returns: entries removed.
    @discardableResult
    public func sweepExpired(now: UInt32, budget: Int) -> Int {
        var removed = 0
        for index in shards.indices {
            withShard(index) { shard in
                let result = shard.sweep(now: now, budget: budget)
                removed += result.removed
                if result.freed > 0 { used.subtract(result.freed, ordering: .relaxed) }
            }
        }
        return removed
    }

    /// The tier's counters, summed over shards.
    public var statistics: CachetMemoryStatistics {
        var statistics = CachetMemoryStatistics(
            items: 0,
            keyValueBytes: 0,
            accountedBytes: 0,
            memoryLimit: memoryLimit,
            evictions: 0,
            expired: 0,
            pooledBytes: pool.pooledBytes
        )
        for index in shards.indices {
            withShard(index) { shard in
                statistics.items += shard.count
                statistics.keyValueBytes += shard.payloadBytes
                statistics.accountedBytes += shard.accountedBytes
                statistics.evictions += shard.evictions
                statistics.expired += shard.expired
            }
        }
        return statistics
    }

    /// Checks every shard's invariants and that the global byte count matches them; traps on a violation.
    package func _checkInvariants() {
        var accounted = 0
        for index in shards.indices {
            withShard(index) { shard in
                shard.checkInvariants()
                accounted += shard.accountedBytes
            }
        }
        precondition(accounted == used.load(ordering: .relaxed), "global byte count disagrees with the shards")
        precondition(accounted <= memoryLimit, "over the limit: \(accounted) > \(memoryLimit)")
    }

    /// Keys of one shard from the front of its LRU list to the back (tests with one shard).
    package func _keysInRecencyOrder(shard: Int = 0) -> [[UInt8]] {
        withShard(shard) { $0.keysInRecencyOrder() }
    }

    /// Keys of one shard read since they were last moved to the front of its LRU list (tests).
    package func _referencedKeys(shard: Int = 0) -> Set<[UInt8]> {
        withShard(shard) { $0.referencedKeys() }
    }

    /// The bytes an entry with these lengths counts against the limit.
    /// - Parameters:
    ///   - keyLength: key bytes.
    ///   - valueLength: value bytes.
    /// - Returns: the accounted size.
    public static func accountedSize(keyLength: Int, valueLength: Int) -> Int {
        MemoryEntry.accountedSize(keyLength: keyLength, valueLength: valueLength)
    }
}

extension CachetMemoryStore {
    /// Stores `value` under `key` (convenience for callers holding arrays).
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    ///   - expiry: absolute seconds, 0 for never.
    ///   - now: the current time.
    /// - Returns: the outcome.
    @discardableResult
    public func put(key: [UInt8], value: [UInt8], expiry: UInt32 = 0, now: UInt32 = CachetClock.now())
        -> CachetPutOutcome
    {
        key.withUnsafeBytes { key in
            value.withUnsafeBytes { value in put(key: key, value: value, expiry: expiry, now: now) }
        }
    }

    /// A copy of the value under `key`, or nil (convenience).
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the current time.
    /// - Returns: the value bytes.
    public func value(forKey key: [UInt8], now: UInt32 = CachetClock.now()) -> [UInt8]? {
        key.withUnsafeBytes { key in withValue(forKey: key, now: now) { value, _ in Array(value) } }
    }

    /// Removes `key` (convenience).
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the current time.
    /// - Returns: whether a live entry was removed.
    @discardableResult
    public func remove(key: [UInt8], now: UInt32 = CachetClock.now()) -> Bool {
        key.withUnsafeBytes { remove(key: $0, now: now) }
    }
}

/// Why the memory tier dropped an entry other than by a request for it.
public enum CachetRemovalReason: Sendable, Hashable {
    /// Its TTL passed.
    case expired
    /// It was evicted to make room.
    case evicted
}

/// Told of each entry the memory tier drops on its own: its key (valid during the call) and why.
public typealias CachetRemovalObserver = @Sendable (UnsafeRawBufferPointer, CachetRemovalReason) -> Void

/// A live entry as ``CachetMemoryStore/update(forKey:now:_:)`` shows it: the value is valid only inside the
/// update's closure.
public struct CachetMemoryItem {
    /// The value's bytes.
    public let value: UnsafeRawBufferPointer
    /// Absolute expiry, 0 for never.
    public let expiry: UInt32
    /// The item fields, if the entry has them.
    public let fields: CachetItemFields?

    /// An item as the caller has it (for example one read from the disk tier).
    public init(value: UnsafeRawBufferPointer, expiry: UInt32, fields: CachetItemFields?) {
        self.value = value
        self.expiry = expiry
        self.fields = fields
    }
}

/// What ``CachetMemoryStore/update(forKey:now:_:)`` does with the entry.
/// What memcached's `mg h` and `mg l` report of an item read by
/// ``CachetMemoryStore/withItemForMetaGet(forKey:now:cas:marking:_:)``.
public struct CachetMetaRead: Hashable, Sendable {
    /// It had been read since it was stored, before this read.
    public var hitBefore: Bool
    /// Seconds since it was last read or written, this read included when it marked the item (the access
    /// time moves at most once a minute, as memcached's does).
    public var idleSeconds: UInt32

    /// A read's report.
    public init(hitBefore: Bool, idleSeconds: UInt32) {
        self.hitBefore = hitBefore
        self.idleSeconds = idleSeconds
    }

    init(_ entry: MemoryEntry, hitBefore: Bool, now: UInt32) {
        self.hitBefore = hitBefore
        let accessed = entry.accessed
        idleSeconds = now > accessed ? now - accessed : 0
    }
}

public enum CachetItemUpdate: Sendable {
    /// Leaves it as it is (or absent).
    case keep
    /// Replaces it (or stores it) with this value, expiry and fields.
    case store(value: [UInt8], expiry: UInt32, fields: CachetItemFields?)
    /// Removes it.
    case remove
}
