import CMalloc

/// Process-wide settings of glibc's allocator that suit a cache node.
///
/// glibc gives threads their own malloc arenas. A Dispatch queue does not keep one thread: after an idle
/// moment an I/O queue may run on another worker, which allocates new entries from its own arena while the
/// entries it replaces go back to the arena they came from. The new arena then grows into fresh memory,
/// and each of its pages costs a page fault when first written, on the request path, with the heap growing
/// behind them (BENCHMARKS.md, "Figures behind choices in the code"). With a single
/// arena the memory of replaced and evicted entries is reused whichever thread frees or allocates it;
/// memcached's slab allocator is likewise one pool behind one lock. A PUT allocates one entry and frees at
/// most the one it replaces, so one arena lock adds little next to the system calls of a request; that was
/// measured with one I/O queue on two cores, not with many queues on many cores.
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
