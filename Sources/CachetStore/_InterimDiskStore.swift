// Interim disk tier with the agreed API (no files yet), replaced by the real tier.
public import Logging
import Dispatch
import Synchronization

public struct CachetDiskConfiguration: Sendable {
    public var directory: String
    public var limit: Int
    public var compressionLevel: Int32
    public var queueCapacity: Int
    public init(directory: String, limit: Int, compressionLevel: Int32 = 6, queueCapacity: Int = 1024) {
        self.directory = directory
        self.limit = limit
        self.compressionLevel = compressionLevel
        self.queueCapacity = queueCapacity
    }
}

public struct CachetDiskEntry: Sendable {
    public var value: [UInt8]
    public var expiry: UInt32
}

public struct CachetDiskStatistics: Sendable {
    public var items = 0
    public var bytes = 0
    public var logicalBytes = 0
    public var limit = 0
    public var hits = 0
    public var errors = 0
    public var corrupt = 0
    public var compressionRatio = 1.0
    public var queueDepth = 0
    public var evictions = 0
}

public struct CachetStoreError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

public final class CachetDiskStore: Sendable {
    let entries = Mutex([[UInt8]: CachetDiskEntry]())
    let configuration: CachetDiskConfiguration
    public init(configuration: CachetDiskConfiguration, logger: Logger) throws(CachetStoreError) {
        self.configuration = configuration
    }
    public func put(key: [UInt8], value: [UInt8], expiry: UInt32) {
        entries.withLock { $0[key] = CachetDiskEntry(value: value, expiry: expiry) }
    }
    public func get(key: [UInt8], now: UInt32) -> CachetDiskEntry? {
        entries.withLock { e in
            guard let entry = e[key] else { return nil }
            if entry.expiry != 0 && entry.expiry <= now { e[key] = nil; return nil }
            return entry
        }
    }
    public func contains(key: UnsafeRawBufferPointer, now: UInt32) -> Bool {
        entries.withLock { $0[Array(key)] != nil }
    }
    public func remove(key: [UInt8]) -> Bool { entries.withLock { $0.removeValue(forKey: key) != nil } }
    public func removeAll() -> (items: Int, bytes: Int) {
        entries.withLock { e in
            let r = (e.count, e.reduce(0) { $0 + $1.key.count + $1.value.value.count })
            e = [:]
            return r
        }
    }
    public var statistics: CachetDiskStatistics {
        var s = CachetDiskStatistics()
        s.items = entries.withLock { $0.count }
        s.limit = configuration.limit
        return s
    }
    public func close() {}
}

public final class CachetDiskWorker: Sendable {
    let store: CachetDiskStore
    let queue = DispatchQueue(label: "cachet.disk")
    let depth = Atomic<Int>(0)
    public init(store: CachetDiskStore) { self.store = store }
    public func submitPut(key: [UInt8], value: [UInt8], expiry: UInt32) -> Bool {
        depth.add(1, ordering: .relaxed)
        queue.async { [self] in
            store.put(key: key, value: value, expiry: expiry)
            depth.subtract(1, ordering: .relaxed)
        }
        return true
    }
    public func submitRemove(key: [UInt8]) { queue.async { [store] in _ = store.remove(key: key) } }
    public func notifyWhenWritable(_ callback: @escaping @Sendable () -> Void) { queue.async { callback() } }
    public func get(key: [UInt8], now: UInt32, completion: @escaping @Sendable (CachetDiskEntry?) -> Void) {
        queue.async { [store] in completion(store.get(key: key, now: now)) }
    }
    public func removeAll(completion: @escaping @Sendable ((items: Int, bytes: Int)) -> Void) {
        queue.async { [store] in completion(store.removeAll()) }
    }
    public func drain() { queue.sync {} }
    public var queueDepth: Int { depth.load(ordering: .relaxed) }
}
