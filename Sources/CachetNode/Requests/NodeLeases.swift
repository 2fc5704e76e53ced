import CachetIO
import CachetLocking
import Synchronization

/// The leases of read-through (`Protocol/PROTOCOL.md`, "Leases"; after "Scaling Memcache at Facebook",
/// NSDI 2013): the first GET with the `lease` flag that misses a key gets a token, and the callers that
/// miss it while the lease stands are told to wait, so a hot key that expires reaches the loader behind
/// the cache about once; a PUT with the token stores only while its lease stands, so a value loaded
/// before a DEL or a newer PUT never replaces it (a stale set).
///
/// Shared by every loop. Plain writes pay one atomic load while no lease is outstanding.
final class NodeLeases: Sendable {
    /// How long a lease stands, in nanoseconds.
    let lifetime: UInt64
    /// The most leases outstanding at once; past it, a miss gets no lease (its caller loads by itself).
    let maximum: Int
    /// How long a caller that missed a held lease is told to wait before asking again.
    static let waitMilliseconds: UInt32 = 10

    /// Leases outstanding (read without the lock by plain writes).
    private let outstanding = Atomic<Int>(0)
    private let table: CachetLock<[[UInt8]: (token: UInt64, expires: UInt64)]>

    /// - Parameters:
    ///   - lifetime: how long a lease stands, in seconds.
    ///   - maximum: the most leases outstanding at once.
    init(lifetime: Double, maximum: Int = 65_536) {
        self.lifetime = UInt64(lifetime * 1e9)
        self.maximum = maximum
        table = CachetLock([:])
    }

    /// What a GET with the `lease` flag that missed `key` is answered.
    enum Grant: Equatable {
        /// The caller holds the key's lease now.
        case granted(UInt64)
        /// Another caller does: wait, then ask again.
        case held
        /// Too many leases are outstanding: no lease; the caller loads by itself.
        case none
    }

    /// A miss of `key`: its lease, if nobody holds one that stands.
    func acquire(_ key: UnsafeRawBufferPointer) -> Grant {
        let now = CachetDeadline.now()
        let keyBytes = Array(key)
        return table.withLock { table in
            if let lease = table[keyBytes], lease.expires > now { return .held }
            if table.count >= maximum {
                table = table.filter { $0.value.expires > now }
                outstanding.store(table.count, ordering: .releasing)
                guard table.count < maximum || table[keyBytes] != nil else { return .none }
            }
            var token: UInt64 = 0
            while token == 0 { token = UInt64.random(in: .min ... .max) }
            if table.updateValue((token, now &+ lifetime), forKey: keyBytes) == nil {
                outstanding.add(1, ordering: .releasing)
            }
            return .granted(token)
        }
    }

    /// A PUT with a lease token: runs `store` (which writes the value) only while the token's lease on
    /// `key` stands, and ends the lease; under the table's lock, so that a plain write of the key is either
    /// before (the lease is lost, nothing stored) or after (it replaces the value stored here).
    /// - Returns: whether the value was stored.
    func complete<Result>(
        _ key: UnsafeRawBufferPointer,
        token: UInt64,
        store: () -> Result
    ) -> Result? {
        let now = CachetDeadline.now()
        let keyBytes = Array(key)
        return table.withLock { table -> Result? in
            guard let lease = table[keyBytes], lease.token == token else { return nil }
            table.removeValue(forKey: keyBytes)
            outstanding.subtract(1, ordering: .releasing)
            guard lease.expires > now else { return nil }
            return store()
        }
    }

    /// A plain PUT or DEL of `key`, before it changes the store: the key's lease, if any, is lost.
    @inline(__always)
    func invalidate(_ key: UnsafeRawBufferPointer) {
        guard outstanding.load(ordering: .acquiring) > 0 else { return }
        let keyBytes = Array(key)
        table.withLock { table in
            if table.removeValue(forKey: keyBytes) != nil { outstanding.subtract(1, ordering: .releasing) }
        }
    }

    /// A CLEAR: every lease is lost.
    func invalidateAll() {
        guard outstanding.load(ordering: .acquiring) > 0 else { return }
        table.withLock { table in
            table.removeAll()
            outstanding.store(0, ordering: .releasing)
        }
    }

    /// Leases outstanding now (STATS).
    var count: Int { outstanding.load(ordering: .relaxed) }
}
