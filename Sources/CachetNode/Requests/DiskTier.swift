import CachetStore

/// The disk tier as the node uses it: the synchronous store (for index look-ups) and the worker that owns
/// the dedicated disk queue (for everything that touches files).
struct DiskTier: Sendable {
    let store: CachetDiskStore
    let worker: CachetDiskWorker
    /// The tier's whole footprint (`--disk-limit`): the journal's files and the entry files' limit.
    let limit: Int
}
