import Dispatch
import Synchronization

/// The dedicated disk queue in front of a ``CachetDiskStore``.
///
/// One serial `DispatchQueue` runs every file operation in submission order, so a read queued after a
/// write of the same key sees it. Writes are bounded: when ``CachetDiskConfiguration/queueCapacity`` of them
/// are waiting, ``submitPut(key:value:expiry:)`` refuses and the caller waits for
/// ``notifyWhenWritable(_:)`` rather than dropping data. Completions run on the disk queue; callers hop
/// back to their own queue.
public final class CachetDiskWorker: Sendable {
    /// The tier the worker writes to.
    public let store: CachetDiskStore
    private let queue = DispatchQueue(label: "cachet.disk", qos: .utility)
    private let pendingWrites = Atomic<Int>(0)
    private let pendingOperations = Atomic<Int>(0)
    private let waiters = LockedBox<[@Sendable () -> Void]>([])
    private let sweepQueued = Atomic<Bool>(false)
    private let capacity: Int

    /// Creates a worker for `store`.
    /// - Parameter store: the disk tier.
    public init(store: CachetDiskStore) {
        self.store = store
        self.capacity = max(1, store.configuration.queueCapacity)
    }

    /// Operations queued or running.
    public var queueDepth: Int { pendingOperations.load(ordering: .relaxed) }

    private func enqueue(_ work: @escaping @Sendable () -> Void) {
        pendingOperations.add(1, ordering: .relaxed)
        queue.async { [self] in
            work()
            pendingOperations.subtract(1, ordering: .relaxed)
        }
    }

    /// Queues a write.
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    ///   - expiry: absolute expiry, 0 for never.
    /// - Returns: false, queueing nothing, when the queue already holds its capacity of writes.
    public func submitPut(key: [UInt8], value: [UInt8], expiry: UInt32) -> Bool {
        while true {
            let current = pendingWrites.load(ordering: .relaxed)
            guard current < capacity else { return false }
            if pendingWrites.compareExchange(expected: current, desired: current + 1, ordering: .relaxed).exchanged {
                break
            }
        }
        enqueue { [self] in
            store.put(key: key, value: value, expiry: expiry)
            pendingWrites.subtract(1, ordering: .relaxed)
            wakeWaiters()
        }
        return true
    }

    /// Calls `callback` once, when fewer than capacity writes are waiting (at once if that is already so).
    /// - Parameter callback: runs on the disk queue or on the caller's thread.
    public func notifyWhenWritable(_ callback: @escaping @Sendable () -> Void) {
        waiters.withLock { $0.append(callback) }
        wakeWaiters()
    }

    private func wakeWaiters() {
        guard pendingWrites.load(ordering: .relaxed) < capacity else { return }
        let ready = waiters.withLock { waiters -> [@Sendable () -> Void] in
            defer { waiters = [] }
            return waiters
        }
        for callback in ready { callback() }
    }

    /// Queues a delete. Always accepted.
    /// - Parameter key: the key.
    public func submitRemove(key: [UInt8]) {
        enqueue { [store] in store.remove(key: key) }
    }

    /// Queues a sweep of expired entries (``CachetDiskStore/sweepExpired(now:budget:)``), unless one is
    /// already waiting, so that a timer calling this never piles sweeps up behind slow writes.
    /// - Parameters:
    ///   - now: the time expiry is judged at.
    ///   - budget: index entries to examine.
    public func submitSweep(now: UInt32, budget: Int) {
        guard sweepQueued.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        enqueue { [self] in
            sweepQueued.store(false, ordering: .relaxed)
            store.sweepExpired(now: now, budget: budget)
        }
    }

    /// Queues a read.
    /// - Parameters:
    ///   - key: the key.
    ///   - now: the time expiry is judged at.
    ///   - completion: receives the entry or nil, on the disk queue.
    public func get(key: [UInt8], now: UInt32, completion: @escaping @Sendable (CachetDiskEntry?) -> Void) {
        enqueue { [store] in completion(store.get(key: key, now: now)) }
    }

    /// Queues a delete of everything, behind the writes already queued.
    /// - Parameter completion: receives the entries and bytes deleted, on the disk queue.
    public func removeAll(completion: @escaping @Sendable ((items: Int, bytes: Int)) -> Void) {
        enqueue { [store] in completion(store.removeAll()) }
    }

    /// Blocks until every queued operation has run.
    public func drain() {
        queue.sync {}
    }
}
