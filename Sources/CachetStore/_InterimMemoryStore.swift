// Interim memory tier with the agreed API, replaced by the packed LRU.
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

public enum CachetClock {
    public static func now() -> UInt32 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &ts)
        return UInt32(truncatingIfNeeded: ts.tv_sec)
    }
}

public struct CachetMemoryStoreConfiguration: Sendable {
    public var memoryLimit: Int
    public var shardCount: Int
    public init(memoryLimit: Int, shardCount: Int = 16) {
        self.memoryLimit = memoryLimit
        self.shardCount = shardCount
    }
}

public enum CachetPutOutcome: Sendable, Equatable { case stored, tooLarge }

public struct CachetMemoryStatistics: Sendable {
    public var items: Int
    public var keyValueBytes: Int
    public var accountedBytes: Int
    public var memoryLimit: Int
    public var evictions: Int
    public var expired: Int
}

public final class CachetMemoryStore: Sendable {
    struct State {
        var entries: [[UInt8]: (value: [UInt8], expiry: UInt32)] = [:]
        var bytes = 0
        var evictions = 0
        var expired = 0
    }
    let state = Mutex(State())
    let limit: Int

    public init(configuration: CachetMemoryStoreConfiguration) { limit = configuration.memoryLimit }

    public func put(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, expiry: UInt32, now: UInt32) -> CachetPutOutcome {
        let size = key.count + value.count + 64
        if size > limit { return .tooLarge }
        return state.withLock { s in
            let k = Array(key)
            if let old = s.entries.removeValue(forKey: k) { s.bytes -= k.count + old.value.count + 64 }
            while s.bytes + size > limit, let victim = s.entries.keys.first {
                let old = s.entries.removeValue(forKey: victim)!
                s.bytes -= victim.count + old.value.count + 64
                s.evictions += 1
            }
            s.entries[k] = (Array(value), expiry)
            s.bytes += size
            return .stored
        }
    }

    public func withValue<R>(forKey key: UnsafeRawBufferPointer, now: UInt32, _ body: (UnsafeRawBufferPointer, UInt32) -> R) -> R? {
        var result: R? = nil
        state.withLock { s in
            let k = Array(key)
            guard let e = s.entries[k] else { return }
            if e.expiry != 0 && e.expiry <= now {
                s.entries.removeValue(forKey: k)
                s.bytes -= k.count + e.value.count + 64
                s.expired += 1
                return
            }
            result = e.value.withUnsafeBytes { body($0, e.expiry) }
        }
        return result
    }

    public func remove(key: UnsafeRawBufferPointer, now: UInt32) -> Bool {
        state.withLock { s in
            let k = Array(key)
            guard let e = s.entries.removeValue(forKey: k) else { return false }
            s.bytes -= k.count + e.value.count + 64
            return e.expiry == 0 || e.expiry > now
        }
    }

    public func removeAll(visit: ((UnsafeRawBufferPointer, Int) -> Void)? = nil) -> (items: Int, bytes: Int) {
        state.withLock { s in
            let items = s.entries.count
            var bytes = 0
            for (k, e) in s.entries {
                bytes += k.count + e.value.count
                k.withUnsafeBytes { visit?($0, e.value.count) }
            }
            s.entries = [:]
            s.bytes = 0
            return (items, bytes)
        }
    }

    public func sweepExpired(now: UInt32, budget: Int) -> Int { 0 }

    public var statistics: CachetMemoryStatistics {
        state.withLock { s in
            CachetMemoryStatistics(
                items: s.entries.count, keyValueBytes: s.bytes - 64 * s.entries.count, accountedBytes: s.bytes,
                memoryLimit: limit, evictions: s.evictions, expired: s.expired)
        }
    }
}
