import CachetIO
import CachetLocking
import Synchronization

/// The leases of read-through (`Protocol/PROTOCOL.md`, "Leases"; after "Scaling Memcache at Facebook",
/// NSDI 2013): the first GET with the `lease` flag that misses a key gets a token, and the callers that
/// miss it while the lease stands are told to wait, so a hot key that expires reaches the loader behind
/// the cache about once; a PUT with the token stores only while its lease stands, so a value loaded
/// before a DEL or a newer PUT never replaces it (a stale set).
///
/// It also keeps the items marked stale (memcached's `md I`, `Protocol/PROTOCOL.md`, "Items: flags, CAS and
/// conditional writes"): each key with the CAS unique of its stale version. A read of the item with that
/// unique is told it is stale; any write of the key forgets the mark, as it ends the lease, and a mark whose
/// unique no longer matches (the item was replaced) is dropped when found.
///
/// Shared by every loop. Plain writes pay one atomic load while no lease or mark is outstanding.
final class NodeLeases: Sendable {
    /// How long a lease stands, in nanoseconds.
    let lifetime: UInt64
    /// The most leases outstanding at once; past it, a miss gets no lease (its caller loads by itself). The
    /// most stale marks kept, too: past it, a mark is forgotten for each new one (that item reads as fresh).
    let maximum: Int
    /// How long a caller that missed a held lease is told to wait before asking again.
    static let waitMilliseconds: UInt32 = 10

    /// Leases and stale marks outstanding (read without the lock by plain writes).
    private let outstanding = Atomic<Int>(0)
    private let table: CachetLock<Table>

    /// The leases, and the stale marks.
    private struct Table {
        var leases: [[UInt8]: (token: UInt64, expires: UInt64)] = [:]
        var stale: [[UInt8]: UInt64] = [:]
        var count: Int { leases.count + stale.count }
    }

    /// - Parameters:
    ///   - lifetime: how long a lease stands, in seconds.
    ///   - maximum: the most leases outstanding at once.
    init(lifetime: Double, maximum: Int = 65_536) {
        self.lifetime = UInt64(lifetime * 1e9)
        self.maximum = maximum
        table = CachetLock(Table())
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

    /// A miss of `key` (or a read that wins its recache): its lease, if nobody holds one that stands.
    /// - Parameter seconds: how long the lease stands, when not the node's lease time.
    func acquire(_ key: UnsafeRawBufferPointer, seconds: UInt32? = nil) -> Grant {
        let now = CachetDeadline.now()
        let keyBytes = Array(key)
        let lifetime = seconds.map { UInt64($0) * 1_000_000_000 } ?? self.lifetime
        return table.withLock { table in
            if let lease = table.leases[keyBytes], lease.expires > now { return .held }
            if table.leases.count >= maximum {
                table.leases = table.leases.filter { $0.value.expires > now }
                outstanding.store(table.count, ordering: .releasing)
                guard table.leases.count < maximum || table.leases[keyBytes] != nil else { return .none }
            }
            var token: UInt64 = 0
            while token == 0 { token = UInt64.random(in: .min ... .max) }
            if table.leases.updateValue((token, now &+ lifetime), forKey: keyBytes) == nil {
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
            guard let lease = table.leases[keyBytes], lease.token == token else { return nil }
            table.leases.removeValue(forKey: keyBytes)
            outstanding.subtract(1, ordering: .releasing)
            guard lease.expires > now else { return nil }
            return store()
        }
    }

    /// A plain PUT or DEL of `key`, before it changes the store: the key's lease, if any, is lost, and so is
    /// its stale mark.
    @inline(__always)
    func invalidate(_ key: UnsafeRawBufferPointer) {
        guard outstanding.load(ordering: .acquiring) > 0 else { return }
        let keyBytes = Array(key)
        table.withLock { table in
            if table.leases.removeValue(forKey: keyBytes) != nil { outstanding.subtract(1, ordering: .releasing) }
            if table.stale.removeValue(forKey: keyBytes) != nil { outstanding.subtract(1, ordering: .releasing) }
        }
    }

    /// A CLEAR: every lease and every stale mark is lost.
    func invalidateAll() {
        guard outstanding.load(ordering: .acquiring) > 0 else { return }
        table.withLock { table in
            table = Table()
            outstanding.store(0, ordering: .releasing)
        }
    }

    /// Marks `key`'s item, whose CAS unique is now `cas`, stale.
    /// - Parameter endingLease: whether the key's lease ends too, so that the next read wins the recache
    ///   (`md I`); a stale write (``CachetWire/CachetItemWrite/Mode/compareAndSwapOrStale``) keeps it.
    func markStale(_ key: UnsafeRawBufferPointer, cas: UInt64, endingLease: Bool) {
        let keyBytes = Array(key)
        table.withLock { table in
            if endingLease, table.leases.removeValue(forKey: keyBytes) != nil {
                outstanding.subtract(1, ordering: .releasing)
            }
            if table.stale[keyBytes] == nil, table.stale.count >= maximum {
                table.stale.remove(at: table.stale.startIndex)
                outstanding.subtract(1, ordering: .releasing)
            }
            if table.stale.updateValue(cas, forKey: keyBytes) == nil { outstanding.add(1, ordering: .releasing) }
        }
    }

    /// Whether `key`'s item, whose CAS unique is `cas`, is marked stale (a mark of another unique is dropped).
    @inline(__always)
    func isStale(_ key: UnsafeRawBufferPointer, cas: UInt64) -> Bool {
        guard outstanding.load(ordering: .acquiring) > 0 else { return false }
        let keyBytes = Array(key)
        return table.withLock { table in
            guard let marked = table.stale[keyBytes] else { return false }
            if marked == cas { return true }
            table.stale.removeValue(forKey: keyBytes)
            outstanding.subtract(1, ordering: .releasing)
            return false
        }
    }

    /// Whether a lease on `key` stands (another caller is loading it: memcached's `Z`).
    @inline(__always)
    func isHeld(_ key: UnsafeRawBufferPointer) -> Bool {
        guard outstanding.load(ordering: .acquiring) > 0 else { return false }
        let now = CachetDeadline.now()
        let keyBytes = Array(key)
        return table.withLock { table in (table.leases[keyBytes]?.expires ?? 0) > now }
    }

    /// Leases outstanding now (STATS).
    var count: Int { table.withLock { $0.leases.count } }

    /// Items marked stale now (STATS).
    var staleCount: Int { table.withLock { $0.stale.count } }
}
