/// A PUT whose value is being written straight into its entry (for example by a socket read of a large
/// value), made by ``CachetMemoryStore/reservePut(key:valueLength:expiry:)``.
///
/// The entry lives outside the store until ``CachetMemoryStore/commit(_:now:)``: readers keep seeing the
/// older value, and a PUT that is abandoned half-written (the peer went away) is freed when this object is
/// released, so a partial value can never be served.
///
/// Not thread-safe: one owner fills and commits it.
public final class CachetPendingPut {
    private var entry: MemoryEntry?
    private let pool: LargeBlockPool

    init(_ entry: MemoryEntry, pool: LargeBlockPool) {
        self.entry = entry
        self.pool = pool
    }

    deinit { entry?.free(to: pool) }

    /// Where the value's bytes go: exactly the value's length. Empty once committed.
    public var value: UnsafeMutableRawBufferPointer {
        entry?.mutableValue ?? UnsafeMutableRawBufferPointer(start: nil, count: 0)
    }

    /// The entry's key; empty once committed.
    public var key: UnsafeRawBufferPointer { entry?.key ?? UnsafeRawBufferPointer(start: nil, count: 0) }

    /// The value's length in bytes; 0 once committed.
    public var valueLength: Int { entry?.valueLength ?? 0 }

    /// Hands the entry to the store.
    func take() -> MemoryEntry? {
        defer { entry = nil }
        return entry
    }
}
