import CachetStore
import Logging
import Synchronization

/// The disk tier as the node uses it: the synchronous store (for index look-ups) and the worker that owns
/// the dedicated disk queue (for everything that touches files).
struct DiskTier: Sendable {
    let store: CachetDiskStore
    let worker: CachetDiskWorker
    /// The tier's whole footprint (`--disk-limit`): the journal's files and the entry files' limit.
    let limit: Int
    /// Values longer than this are kept here only, never whole in memory (`--large-value`).
    let largeValueThreshold: Int
    /// The values being received in parts, staged here.
    let uploads: NodeUploads
    /// GETs of large values that waited for another's read to end (STATS `disk_reads_deferred`).
    let readsDeferred = SharedCounter()

    /// Opens the tier `configuration` describes (nil when its limit is 0: no tier), its evictions and
    /// expiries announced to `watches` as the cache's.
    /// - Parameters:
    ///   - configuration: the tier's directory and limits.
    ///   - clusterMember: whether the node is a cluster member (its stand-in log counts in the footprint).
    ///   - watches: the node's WATCH hub.
    ///   - logger: where the tier logs.
    /// - Throws: ``CachetNodeError`` `storageUnusable` with the store's reason.
    static func open(
        _ configuration: CachetDiskConfiguration,
        clusterMember: Bool,
        largeValueThreshold: Int = 8 << 20,
        uploadIdleSeconds: Int = 30,
        watches: NodeWatchHub,
        logger: Logger
    ) throws(CachetNodeError) -> DiskTier? {
        guard configuration.limit > 0 else { return nil }
        do {
            let store = try CachetDiskStore(configuration: configuration, logger: logger)
            store.observeRemovals(when: { watches.isWatched }) { key, reason in
                key.withUnsafeBytes { watches.publish(reason == .evicted ? .evicted : .expired, key: $0) }
            }
            return DiskTier(
                store: store,
                worker: CachetDiskWorker(store: store),
                limit: configuration.footprint(clusterMember: clusterMember),
                largeValueThreshold: largeValueThreshold,
                uploads: NodeUploads(byteLimit: store.maximumEntryBytes, idleSeconds: UInt32(uploadIdleSeconds))
            )
        } catch {
            throw CachetNodeError(code: .storageUnusable, message: error.description, underlying: error)
        }
    }
}

/// A count several loops add to.
final class SharedCounter: Sendable {
    private let count = Atomic<Int>(0)

    func add(_ delta: Int) { count.add(delta, ordering: .relaxed) }

    var value: Int { count.load(ordering: .relaxed) }
}
