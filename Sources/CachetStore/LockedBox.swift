#if canImport(Glibc)
import Glibc
#endif

/// A value guarded by a mutex, for state that holds non-`Sendable` things (Dispatch sources, indexes
/// with raw storage). Shared by the package's modules; not API.
///
/// `@unchecked Sendable`: `value` is read and written only inside ``withLock(_:)``, under `mutex`.
package final class LockedBox<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    package init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
