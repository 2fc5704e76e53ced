import CachetStore

/// The disk tier as the node uses it: the synchronous store (for index look-ups) and the worker that owns
/// the dedicated disk queue (for everything that touches files).
struct DiskTier: Sendable {
    let store: CachetDiskStore
    let worker: CachetDiskWorker
    let limit: Int
}

/// A request that waits for the disk queue. The connection reads and answers nothing more until it
/// completes, so replies stay in request order.
enum PendingOperation {
    /// A GET that missed memory and may be on disk.
    case get(key: [UInt8], id: UInt32)
    /// A PUT whose disk write waits for room in the bounded disk queue.
    case put(key: [UInt8], value: [UInt8], expiry: UInt32, id: UInt32)
    /// A CLEAR: memory is empty; the disk tier empties behind the queued writes.
    case clear(id: UInt32, memoryOnlyItems: Int, memoryOnlyBytes: Int)
}
