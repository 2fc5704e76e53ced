import CachetCluster
import CachetStore
import CachetWire

/// The disk tier as the node uses it: the synchronous store (for index look-ups) and the worker that owns
/// the dedicated disk queue (for everything that touches files).
struct DiskTier: Sendable {
    let store: CachetDiskStore
    let worker: CachetDiskWorker
    let limit: Int
}

/// A request that waits for something outside the loop: the disk queue, or the member it is forwarded to.
/// The connection reads and answers nothing more until it completes, so replies stay in request order.
enum PendingOperation {
    /// A GET that missed memory and may be on disk.
    case get(key: [UInt8], id: UInt32)
    /// A PUT whose disk write waits for room in the bounded disk queue.
    case put(key: [UInt8], value: [UInt8], expiry: UInt32, id: UInt32)
    /// A CLEAR: memory is empty; the disk tier empties behind the queued writes.
    case clear(id: UInt32, memoryOnlyItems: Int, memoryOnlyBytes: Int)
    /// A GET, PUT or DEL of a key another member owns (`Protocol/CLUSTER.md`, "Forwarding").
    case forward(ForwardRequest)
    /// A CLEAR or STATS with the `cluster` flag: asked of every member (`Protocol/PROTOCOL.md`,
    /// "Cluster-wide CLEAR and STATS"). The request's `owner` is unused.
    case fanOut(ForwardRequest)
}

/// A request on its way to the member that owns its key: the whole frame as received, with the
/// `forwarded` flag set (the request id is replaced by the peer connection's own), and what the client's
/// reply needs back. A class, so that ``PendingOperation`` (and the result every batch of requests
/// returns) stays as small as before forwarding: a larger payload cost about 30 instructions per request
/// in copies and destroys of that result (callgrind).
final class ForwardRequest: Sendable {
    let frame: [UInt8]
    let opcode: CachetOpcode
    let id: UInt32
    let owner: CachetClusterMember

    init(frame: [UInt8], opcode: CachetOpcode, id: UInt32, owner: CachetClusterMember) {
        self.frame = frame
        self.opcode = opcode
        self.id = id
        self.owner = owner
    }
}
