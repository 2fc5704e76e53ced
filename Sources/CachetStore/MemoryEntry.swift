#if canImport(Glibc)
import Glibc
#endif

/// One cache entry in a single `malloc` block: a 34-byte header, then the key, then the value
/// (memcached's item layout). No Swift object per entry, so a 14-byte key with a 100-byte value costs one
/// 160-byte heap chunk plus a table slot. Blocks of 64 KiB and more come from a ``LargeBlockPool`` at a
/// size class, and go back to it.
///
/// ```
/// offset  0  prev    8 bytes  (towards the most recently used end; its top 16 bits: the high half of the
///                             last access time)
/// offset  8  next    8 bytes  (towards the least recently used end; its top 16 bits: the low half)
/// offset 16  hash    8 bytes
/// offset 24  expiry  4 bytes  (Unix seconds, 0 = never)
/// offset 28  value length  4 bytes
/// offset 32  key length    2 bytes  (the top bit is the "referenced" mark of the second-chance LRU; the
///                                  next one says that item fields follow the value; the third that the
///                                  entry was read since it was stored, memcached's "fetched")
/// offset 34  key, then value, then (only with the bit) the item fields: flags 4 bytes, CAS 8 bytes
/// ```
@usableFromInline
struct MemoryEntry: Equatable {
    let base: UnsafeMutableRawPointer

    static let headerSize = 34
    static let maximumKeyLength = 0x1fff
    private static let referencedBit: UInt16 = 0x8000
    private static let fieldsBit: UInt16 = 0x4000
    private static let fetchedBit: UInt16 = 0x2000
    private static let lengthMask: UInt16 = 0x1fff

    init(_ base: UnsafeMutableRawPointer) { self.base = base }

    /// Allocates and fills an entry; links are nil.
    @inline(__always)
    static func make(
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        hash: UInt64,
        expiry: UInt32,
        fields: CachetItemFields? = nil,
        accessed: UInt32 = CachetClock.now(),
        pool: LargeBlockPool
    ) -> MemoryEntry {
        let entry = makeUnfilled(
            key: key,
            valueLength: value.count,
            hash: hash,
            expiry: expiry,
            fields: fields,
            accessed: accessed,
            pool: pool
        )
        if value.count > 0 {
            (entry.base + headerSize + key.count).copyMemory(from: value.baseAddress!, byteCount: value.count)
        }
        return entry
    }

    /// Allocates an entry with its header and key written and room for a value of `valueLength` bytes,
    /// left uninitialised for the caller to fill; links are nil.
    @inline(__always)
    static func makeUnfilled(
        key: UnsafeRawBufferPointer,
        valueLength: Int,
        hash: UInt64,
        expiry: UInt32,
        fields: CachetItemFields? = nil,
        accessed: UInt32 = CachetClock.now(),
        pool: LargeBlockPool
    ) -> MemoryEntry {
        let extra = fields == nil ? 0 : CachetItemFields.storedSize
        let base = pool.allocate(size: LargeBlockPool.blockSize(for: headerSize + key.count + valueLength + extra))
        let entry = MemoryEntry(base)
        base.storeBytes(of: UInt(0), as: UInt.self)
        base.storeBytes(of: UInt(0), toByteOffset: 8, as: UInt.self)
        entry.accessed = accessed
        base.storeBytes(of: hash, toByteOffset: 16, as: UInt64.self)
        base.storeBytes(of: expiry, toByteOffset: 24, as: UInt32.self)
        base.storeBytes(of: UInt32(valueLength), toByteOffset: 28, as: UInt32.self)
        precondition(key.count <= maximumKeyLength)
        base.storeBytes(of: UInt16(key.count) | (fields == nil ? 0 : fieldsBit), toByteOffset: 32, as: UInt16.self)
        if key.count > 0 { (base + headerSize).copyMemory(from: key.baseAddress!, byteCount: key.count) }
        if let fields {
            let at = headerSize + key.count + valueLength
            base.storeBytes(of: fields.flags, toByteOffset: at, as: UInt32.self)
            base.storeBytes(of: fields.cas, toByteOffset: at + 4, as: UInt64.self)
        }
        return entry
    }

    /// The value's bytes, writable: only for an entry not yet in a shard.
    var mutableValue: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(start: base + Self.headerSize + keyLength, count: valueLength)
    }

    /// Gives the entry's block back to the pool it came from (which frees it or keeps it for reuse).
    @inline(__always)
    func free(to pool: LargeBlockPool) {
        pool.release(base, size: LargeBlockPool.blockSize(for: Self.headerSize + keyLength + valueLength + fieldsSize))
    }

    /// The bits of a link word that hold the address: heap addresses lie below 2^48 (the shard checks it
    /// when it links an entry), and the 16 above carry half of ``accessed`` each.
    private static let addressBits: UInt = 0x0000_FFFF_FFFF_FFFF

    @inline(__always)
    private func link(at offset: Int) -> MemoryEntry? {
        UnsafeMutableRawPointer(bitPattern: base.load(fromByteOffset: offset, as: UInt.self) & Self.addressBits)
            .map(MemoryEntry.init)
    }

    @inline(__always)
    private func setLink(_ entry: MemoryEntry?, at offset: Int) {
        let high = base.load(fromByteOffset: offset, as: UInt.self) & ~Self.addressBits
        base.storeBytes(of: high | UInt(bitPattern: entry?.base), toByteOffset: offset, as: UInt.self)
    }

    var prev: MemoryEntry? {
        get { link(at: 0) }
        nonmutating set { setLink(newValue, at: 0) }
    }

    var next: MemoryEntry? {
        get { link(at: 8) }
        nonmutating set { setLink(newValue, at: 8) }
    }

    /// When the entry was last read or written (``CachetClock`` seconds): set when it is made, and by a
    /// read that marks it when it is a minute old or more (memcached's `ITEM_UPDATE_INTERVAL`: a hit rarely
    /// writes). memcached's `mg l`. Kept in the link words' spare bits, so it costs no byte.
    var accessed: UInt32 {
        get {
            let high = base.load(as: UInt.self) >> 48
            let low = base.load(fromByteOffset: 8, as: UInt.self) >> 48
            return UInt32(truncatingIfNeeded: high << 16 | low)
        }
        nonmutating set {
            let previous = base.load(as: UInt.self) & Self.addressBits
            let next = base.load(fromByteOffset: 8, as: UInt.self) & Self.addressBits
            base.storeBytes(of: previous | UInt(newValue >> 16) << 48, as: UInt.self)
            base.storeBytes(of: next | UInt(newValue & 0xffff) << 48, toByteOffset: 8, as: UInt.self)
        }
    }

    /// How often a read updates ``accessed``: once its time is this old.
    static let accessUpdateInterval: UInt32 = 60

    /// Brings ``accessed`` up to `now` when it is ``accessUpdateInterval`` old or more (or ahead of `now`).
    @inline(__always)
    func noteAccess(now: UInt32) {
        // Past the interval, or behind `now` (a clock set back): `now - last` wraps to above it.
        if now &- accessed >= Self.accessUpdateInterval { accessed = now }
    }

    var hash: UInt64 { base.load(fromByteOffset: 16, as: UInt64.self) }

    var expiry: UInt32 { base.load(fromByteOffset: 24, as: UInt32.self) }

    var valueLength: Int { Int(base.load(fromByteOffset: 28, as: UInt32.self)) }

    var keyLength: Int { Int(base.load(fromByteOffset: 32, as: UInt16.self) & Self.lengthMask) }

    /// Whether item fields follow the value.
    var hasFields: Bool { base.load(fromByteOffset: 32, as: UInt16.self) & Self.fieldsBit != 0 }

    /// The bytes of item fields after the value: 12 or 0.
    var fieldsSize: Int { hasFields ? CachetItemFields.storedSize : 0 }

    /// The item fields, if the entry has them (unaligned: read byte-wise).
    var fields: CachetItemFields? {
        guard hasFields else { return nil }
        let at = Self.headerSize + keyLength + valueLength
        return CachetItemFields(
            flags: base.loadUnaligned(fromByteOffset: at, as: UInt32.self),
            cas: base.loadUnaligned(fromByteOffset: at + 4, as: UInt64.self)
        )
    }

    /// Read since it was stored (memcached's `mg h`, "hit before"): set by every read that marks the entry
    /// (``markRead()``), never cleared; a new entry for the key starts without it.
    var fetched: Bool {
        get { base.load(fromByteOffset: 32, as: UInt16.self) & Self.fetchedBit != 0 }
        nonmutating set {
            let length = base.load(fromByteOffset: 32, as: UInt16.self) & ~Self.fetchedBit
            base.storeBytes(of: newValue ? length | Self.fetchedBit : length, toByteOffset: 32, as: UInt16.self)
        }
    }

    /// Marks a read: ``referenced`` for the LRU and ``fetched``, in one store, and only when either was
    /// clear (a hit then costs no write to a header that already says so).
    @inline(__always)
    func markRead() {
        let bits = base.load(fromByteOffset: 32, as: UInt16.self)
        let both = Self.referencedBit | Self.fetchedBit
        if bits & both != both { base.storeBytes(of: bits | both, toByteOffset: 32, as: UInt16.self) }
    }

    /// Read since it was last moved to the front of the LRU list: the next eviction scan moves it to the
    /// front again instead of evicting it. A read sets it in the header the lookup has just loaded, so a
    /// hit costs no write to other entries.
    var referenced: Bool {
        get { base.load(fromByteOffset: 32, as: UInt16.self) & Self.referencedBit != 0 }
        nonmutating set {
            let length = base.load(fromByteOffset: 32, as: UInt16.self) & ~Self.referencedBit
            base.storeBytes(of: newValue ? length | Self.referencedBit : length, toByteOffset: 32, as: UInt16.self)
        }
    }

    var key: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base + Self.headerSize, count: keyLength) }

    var value: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base + Self.headerSize + keyLength, count: valueLength)
    }

    /// Key and value bytes: what CLEAR reports and STATS calls payload.
    var payloadSize: Int { keyLength + valueLength }

    /// Whether the entry holds exactly `key`.
    func matches(_ key: UnsafeRawBufferPointer, hash: UInt64) -> Bool {
        guard self.hash == hash, keyLength == key.count else { return false }
        return memcmp(base + Self.headerSize, key.baseAddress!, key.count) == 0
    }

    /// The bytes an entry of this shape costs: glibc's chunk for the block (8 bytes of header, 16-byte
    /// granules, 32 at least; a large block rounded up to its size class first) plus a hash-table slot at
    /// its worst load (8 bytes at 50%).
    @inline(__always)
    static func accountedSize(keyLength: Int, valueLength: Int, fieldsSize: Int = 0) -> Int {
        let request = LargeBlockPool.blockSize(for: headerSize + keyLength + valueLength + fieldsSize)
        let chunk = max(32, (request + 8 + 15) & ~15)
        return chunk + 16
    }

    var accountedSize: Int {
        @inline(__always) get {
            Self.accountedSize(keyLength: keyLength, valueLength: valueLength, fieldsSize: fieldsSize)
        }
    }
}
