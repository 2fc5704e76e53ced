import CMalloc

/// Process-wide settings of glibc's allocator that suit a cache node.
///
/// glibc gives threads their own malloc arenas. A Dispatch queue does not keep one thread: after an idle
/// moment an I/O queue may run on another worker, which allocates new entries from its own arena while the
/// entries it replaces go back to the arena they came from. The new arena then grows into fresh memory,
/// and each of its pages costs a page fault when first written, on the request path (with 16 KiB values
/// after a restart of the load: about 3 faults per PUT, and the heap growing behind them). With a single
/// arena the memory of replaced and evicted entries is reused whichever thread frees or allocates it;
/// memcached's slab allocator is likewise one pool behind one lock. Entries are allocated and freed under
/// their shard's lock, once per PUT, so one arena lock adds no contention that matters next to the system
/// calls of a request.
///
/// `cachet-node` applies these settings first thing, before any thread allocates; a program that embeds
/// ``CachetNodeServer`` may call ``applyToProcess()`` the same way. They are process-wide, which is why
/// the server itself does not apply them.
public enum CachetAllocatorSettings {
    /// Limits glibc to one malloc arena for every thread. Call it before starting threads; arenas that
    /// already exist stay.
    /// - Returns: whether glibc accepted the setting.
    @discardableResult
    public static func applyToProcess() -> Bool {
        cachet_malloc_set_arena_max(1) == 1
    }
}
