#if canImport(Glibc)
import Glibc
#endif

/// One shard of the memory tier: an open-addressing hash table of entry pointers and an intrusive LRU list
/// with second chance (CLOCK): a read only marks its entry; eviction walks from the least recently used
/// end and moves each marked entry back to the front, clearing its mark, until it finds an unmarked one.
/// A hit thus touches only its own entry instead of relinking it between two others (which on a large
/// working set meant cache misses on both neighbours); the order is LRU by insertion and by the last
/// rescue, which is what memcached and most caches approximate as well.
///
/// Not thread-safe: ``CachetMemoryStore`` holds the shard's lock around every call.
///
/// The table is linear-probing with backward-shift deletion (no tombstones). A slot holds the entry's
/// address in its low 48 bits and 16 bits of the key's hash above them, so most mismatches are rejected
/// without touching the entry.
final class MemoryShard {
    private var slots: UnsafeMutablePointer<UInt>
    private var capacity: Int
    private(set) var count = 0
    /// Most recently used.
    private var head: MemoryEntry?
    /// Least recently used.
    private var tail: MemoryEntry?
    /// Where the incremental expiry sweep resumes (walking from tail to head).
    private var sweepCursor: MemoryEntry?
    private(set) var accountedBytes = 0
    private(set) var payloadBytes = 0
    /// Entries with an expiry: while there are none, the sweep has nothing to look for.
    private(set) var expiringCount = 0
    private(set) var evictions = 0
    private(set) var expired = 0

    private static let initialCapacity = 16
    private static let addressMask: UInt = (1 << 48) - 1

    /// Where entries' blocks come from and go back to; shared by every shard of a tier.
    private let pool: LargeBlockPool
    /// Told of each entry that expires or is evicted, under the shard's lock.
    private let observer: CachetRemovalObserver?

    init(pool: LargeBlockPool, observer: CachetRemovalObserver? = nil) {
        self.pool = pool
        self.observer = observer
        capacity = Self.initialCapacity
        slots = .allocate(capacity: capacity)
        slots.initialize(repeating: 0, count: capacity)
    }

    deinit {
        var entry = head
        while let current = entry {
            entry = current.next
            current.free(to: pool)
        }
        slots.deallocate()
    }

    // MARK: Table

    @inline(__always)
    private static func tag(_ hash: UInt64) -> UInt { UInt(truncatingIfNeeded: hash >> 32) & 0xffff }

    @inline(__always)
    private func slotValue(_ entry: MemoryEntry) -> UInt {
        UInt(bitPattern: entry.base) | (Self.tag(entry.hash) << 48)
    }

    /// The slot index holding `key`, or nil.
    @inline(__always)
    private func find(_ key: UnsafeRawBufferPointer, hash: UInt64) -> Int? {
        let mask = capacity - 1
        let tag = Self.tag(hash)
        var index = Int(truncatingIfNeeded: hash) & mask
        while true {
            let slot = slots[index]
            if slot == 0 { return nil }
            if slot >> 48 == tag {
                let entry = MemoryEntry(UnsafeMutableRawPointer(bitPattern: slot & Self.addressMask)!)
                if entry.matches(key, hash: hash) { return index }
            }
            index = (index + 1) & mask
        }
    }

    @inline(__always)
    private func entry(at index: Int) -> MemoryEntry {
        MemoryEntry(UnsafeMutableRawPointer(bitPattern: slots[index] & Self.addressMask)!)
    }

    private func insertIntoTable(_ entry: MemoryEntry) {
        if (count + 1) * 4 > capacity * 3 { grow() }
        let mask = capacity - 1
        var index = Int(truncatingIfNeeded: entry.hash) & mask
        while slots[index] != 0 { index = (index + 1) & mask }
        slots[index] = slotValue(entry)
        count += 1
    }

    private func grow() {
        let oldSlots = slots
        let oldCapacity = capacity
        capacity *= 2
        slots = .allocate(capacity: capacity)
        slots.initialize(repeating: 0, count: capacity)
        let mask = capacity - 1
        for i in 0..<oldCapacity where oldSlots[i] != 0 {
            let entry = MemoryEntry(UnsafeMutableRawPointer(bitPattern: oldSlots[i] & Self.addressMask)!)
            var index = Int(truncatingIfNeeded: entry.hash) & mask
            while slots[index] != 0 { index = (index + 1) & mask }
            slots[index] = oldSlots[i]
        }
        oldSlots.deallocate()
    }

    /// Empties slot `index` and shifts the following cluster back so that every probe still succeeds.
    private func removeFromTable(at index: Int) {
        let mask = capacity - 1
        var hole = index
        var next = (index + 1) & mask
        while slots[next] != 0 {
            let home = Int(truncatingIfNeeded: entry(at: next).hash) & mask
            // Move the entry at `next` into the hole if its home is not within (hole, next].
            let distanceToHome = (next - home) & mask
            let distanceToHole = (next - hole) & mask
            if distanceToHome >= distanceToHole {
                slots[hole] = slots[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        slots[hole] = 0
        count -= 1
    }

    // MARK: LRU list

    @inline(__always)
    private func unlink(_ entry: MemoryEntry) {
        if let prev = entry.prev { prev.next = entry.next } else { head = entry.next }
        if let next = entry.next { next.prev = entry.prev } else { tail = entry.prev }
        if sweepCursor == entry { sweepCursor = entry.prev }
        entry.prev = nil
        entry.next = nil
    }

    @inline(__always)
    private func pushFront(_ entry: MemoryEntry) {
        entry.prev = nil
        entry.next = head
        if let head { head.prev = entry } else { tail = entry }
        head = entry
    }

    @inline(__always)
    private func touch(_ entry: MemoryEntry) {
        guard head != entry else { return }
        unlink(entry)
        pushFront(entry)
    }

    // MARK: Operations

    /// Removes the entry at `index` from table and list and frees it; returns the accounted bytes freed.
    @discardableResult
    private func discard(at index: Int) -> Int {
        let entry = entry(at: index)
        removeFromTable(at: index)
        unlink(entry)
        let size = entry.accountedSize
        accountedBytes -= size
        payloadBytes -= entry.payloadSize
        if entry.expiry != 0 { expiringCount -= 1 }
        entry.free(to: pool)
        return size
    }

    /// Stores a new entry, replacing an older one with the same key.
    /// - Returns: the change in accounted bytes.
    @inline(__always)
    func insert(
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        hash: UInt64,
        expiry: UInt32,
        fields: CachetItemFields? = nil,
        now: UInt32 = CachetClock.now()
    ) -> Int {
        var delta = 0
        if let index = find(key, hash: hash) { delta -= discard(at: index) }
        let entry = MemoryEntry.make(
            key: key,
            value: value,
            hash: hash,
            expiry: expiry,
            fields: fields,
            accessed: now,
            pool: pool
        )
        return delta + link(entry)
    }

    /// Stores an entry made (and filled) outside the shard, replacing an older one with the same key.
    /// - Returns: the change in accounted bytes.
    func insert(_ entry: MemoryEntry) -> Int {
        var delta = 0
        if let index = find(entry.key, hash: entry.hash) { delta -= discard(at: index) }
        return delta + link(entry)
    }

    /// Puts a new entry into the table and at the front of the LRU list. Returns its accounted size.
    private func link(_ entry: MemoryEntry) -> Int {
        precondition(UInt(bitPattern: entry.base) & ~Self.addressMask == 0, "heap address above 48 bits")
        insertIntoTable(entry)
        pushFront(entry)
        let size = entry.accountedSize
        accountedBytes += size
        payloadBytes += entry.payloadSize
        if entry.expiry != 0 { expiringCount += 1 }
        return size
    }

    /// Looks `key` up, refreshing a live hit (for the LRU, and as read: ``MemoryEntry/markRead()``) unless
    /// `marking` is false, and discarding an expired one.
    func lookup(_ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt32, marking: Bool = true)
        -> (entry: MemoryEntry?, freed: Int)
    {
        guard let index = find(key, hash: hash) else { return (nil, 0) }
        let entry = entry(at: index)
        if CachetClock.isExpired(entry.expiry, now: now) {
            expired += 1
            observer?(entry.key, .expired)
            return (nil, discard(at: index))
        }
        if marking {
            entry.markRead()
            entry.noteAccess(now: now)
        }
        return (entry, 0)
    }

    /// Removes `key`. Returns whether a live entry was removed, and the bytes freed.
    func remove(_ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt32) -> (removed: Bool, freed: Int) {
        guard let index = find(key, hash: hash) else { return (false, 0) }
        let live = !CachetClock.isExpired(entry(at: index).expiry, now: now)
        if !live {
            expired += 1
            observer?(entry(at: index).key, .expired)
        }
        return (live, discard(at: index))
    }

    /// Evicts the least recently used entry not read since it was last moved to the front, never `keep`
    /// (the entry just inserted). Returns the bytes freed, 0 if there is nothing else to evict.
    /// - Complexity: amortised O(1); one pass over the shard at worst, each step clearing a mark.
    func evictOne(keeping keep: MemoryEntry? = nil) -> Int {
        var steps = 0
        while let candidate = tail, steps <= 2 * count {
            if candidate == keep {
                guard count > 1 else { return 0 }
            } else if candidate.referenced {
                candidate.referenced = false
            } else {
                break
            }
            touch(candidate)
            steps += 1
        }
        guard let victim = tail, victim != keep, let index = find(victim.key, hash: victim.hash) else { return 0 }
        evictions += 1
        observer?(victim.key, .evicted)
        return discard(at: index)
    }

    /// The entry at the front of the LRU list: the one just inserted, right after an insert.
    var mostRecent: MemoryEntry? { head }

    /// Removes every entry, calling `visit` with each key and value length. Returns items and payload bytes.
    func removeAll(visit: ((UnsafeRawBufferPointer, Int) -> Void)?) -> (
        items: Int, payloadBytes: Int, accountedBytes: Int
    ) {
        let result = (count, payloadBytes, accountedBytes)
        var entry = head
        while let current = entry {
            entry = current.next
            visit?(current.key, current.valueLength)
            current.free(to: pool)
        }
        head = nil
        tail = nil
        sweepCursor = nil
        slots.deallocate()
        capacity = Self.initialCapacity
        slots = .allocate(capacity: capacity)
        slots.initialize(repeating: 0, count: capacity)
        count = 0
        accountedBytes = 0
        payloadBytes = 0
        expiringCount = 0
        return result
    }

    /// Removes the entries whose keys start with one of `prefixes`, calling `visit` with each key and value
    /// length. Returns items, payload bytes and accounted bytes removed.
    func removeAll(
        prefixes: [[UInt8]],
        visit: ((UnsafeRawBufferPointer, Int) -> Void)?
    ) -> (items: Int, payloadBytes: Int, accountedBytes: Int) {
        var result = (items: 0, payloadBytes: 0, accountedBytes: 0)
        var entry = head
        while let current = entry {
            entry = current.next
            let key = current.key
            guard prefixes.contains(where: { prefix in key.starts(with: prefix) }),
                let index = find(key, hash: current.hash)
            else { continue }
            visit?(key, current.valueLength)
            result.items += 1
            result.payloadBytes += current.payloadSize
            result.accountedBytes += discard(at: index)
        }
        return result
    }

    /// Examines up to `budget` entries, walking from the least recently used end and resuming where the
    /// previous sweep stopped; removes the expired ones. Returns (removed, bytes freed).
    func sweep(now: UInt32, budget: Int) -> (removed: Int, freed: Int) {
        // Without entries that can expire, walking the list (a cache miss per entry, under the shard's
        // lock) would find nothing.
        guard expiringCount > 0 else { return (0, 0) }
        var removed = 0
        var freed = 0
        var examined = 0
        var entry = sweepCursor ?? tail
        while let current = entry, examined < budget {
            examined += 1
            entry = current.prev
            if CachetClock.isExpired(current.expiry, now: now), let index = find(current.key, hash: current.hash) {
                expired += 1
                observer?(current.key, .expired)
                removed += 1
                freed += discard(at: index)
            }
        }
        sweepCursor = entry
        return (removed, freed)
    }

    /// Checks every structural invariant; traps with a message on the first violation.
    func checkInvariants() {
        var walked = 0
        var accounted = 0
        var payload = 0
        var expiring = 0
        var previous: MemoryEntry? = nil
        var entry = head
        while let current = entry {
            precondition(current.prev == previous, "prev link broken")
            precondition(find(current.key, hash: current.hash) != nil, "listed entry missing from the table")
            accounted += current.accountedSize
            payload += current.payloadSize
            if current.expiry != 0 { expiring += 1 }
            walked += 1
            precondition(walked <= count, "list longer than the table (cycle?)")
            previous = current
            entry = current.next
        }
        precondition(tail == previous, "tail is not the last entry")
        precondition(walked == count, "list has \(walked) entries, table \(count)")
        precondition(accounted == accountedBytes, "accounted bytes \(accountedBytes), entries sum to \(accounted)")
        precondition(payload == payloadBytes, "payload bytes \(payloadBytes), entries sum to \(payload)")
        precondition(expiring == expiringCount, "expiring count \(expiringCount), entries with an expiry \(expiring)")
        var occupied = 0
        for i in 0..<capacity where slots[i] != 0 { occupied += 1 }
        precondition(occupied == count, "table holds \(occupied) slots, count \(count)")
        precondition(count * 4 <= capacity * 3, "table over its load factor")
    }

    /// Keys whose entries carry the second-chance mark (tests only).
    func referencedKeys() -> Set<[UInt8]> {
        var keys: Set<[UInt8]> = []
        var entry = head
        while let current = entry {
            if current.referenced { keys.insert(Array(current.key)) }
            entry = current.next
        }
        return keys
    }

    /// Keys from the front of the LRU list to its back (tests only).
    func keysInRecencyOrder() -> [[UInt8]] {
        var keys: [[UInt8]] = []
        var entry = head
        while let current = entry {
            keys.append(Array(current.key))
            entry = current.next
        }
        return keys
    }
}
