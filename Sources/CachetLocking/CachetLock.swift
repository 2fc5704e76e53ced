#if canImport(Glibc)
import Glibc
#endif

/// A value guarded by a mutual-exclusion lock: the one lock type of the package.
///
/// It is a `pthread_mutex_t`, not `Synchronization.Mutex`, for one reason: ThreadSanitizer does not see
/// `Mutex` on Linux (its futex-based lock is built without instrumentation, so two threads that touch a
/// value only inside `withLock` are reported as racing), while it understands pthread mutexes. With one
/// lock type that the sanitizer sees, its verdict on the whole package can be trusted. The cost is one
/// uncontended `pthread_mutex_lock`/`unlock` pair, as with `Mutex` (neither is on a per-request path of
/// the node).
///
/// The shape follows `Mutex`: the value is reached only through ``withLock(_:)``, which hands it over
/// `inout` while the lock is held, and values enter and leave as `sending`, so a non-`Sendable` value
/// cannot escape the lock. A class, so that the mutex has a stable address; hold it in a `let`.
///
/// `@unchecked Sendable`: the value is read and written only inside ``withLock(_:)``, under `mutex`.
package final class CachetLock<Value: ~Copyable>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let value: UnsafeMutablePointer<Value>

    /// Creates a lock guarding `initialValue`.
    /// - Parameter initialValue: the value, handed over to the lock.
    package init(_ initialValue: consuming sending Value) {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        value = .allocate(capacity: 1)
        value.initialize(to: initialValue)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value while holding the lock.
    /// - Parameter body: reads or changes the value; it must not take this lock again (that deadlocks).
    /// - Returns: what `body` returns.
    /// - Throws: what `body` throws; the lock is released either way.
    package func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }

    /// Runs `body` with the value while holding the lock, without the `sending` checks of
    /// ``withLock(_:)``: for a value that holds references the caller goes on using after storing them
    /// (Dispatch sources, which are themselves thread-safe). The caller vouches that what crosses the
    /// lock this way is safe to share.
    /// - Parameter body: reads or changes the value; it must not take this lock again (that deadlocks).
    /// - Returns: what `body` returns.
    /// - Throws: what `body` throws; the lock is released either way.
    package func withLockUnchecked<Result: ~Copyable, E: Error>(
        _ body: (inout Value) throws(E) -> Result
    ) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }
}
