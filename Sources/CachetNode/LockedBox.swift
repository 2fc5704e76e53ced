#if canImport(Glibc)
import Glibc
#endif

/// A value guarded by a mutex, for state that holds non-`Sendable` things such as Dispatch sources.
///
/// `@unchecked Sendable`: `value` is read and written only inside ``withLock(_:)``, under `mutex`.
final class LockedBox<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
