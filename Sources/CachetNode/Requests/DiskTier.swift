import CachetCluster
import CachetStore
import CachetWire

/// The disk tier as the node uses it: the synchronous store (for index look-ups) and the worker that owns
/// the dedicated disk queue (for everything that touches files).
struct DiskTier: Sendable {
    let store: CachetDiskStore
    let worker: CachetDiskWorker
    /// The tier's whole footprint (`--disk-limit`): the journal's files and the entry files' limit.
    let limit: Int
}

/// A request that waits for something outside the loop: the disk queue, or the member it is forwarded to.
/// The connection reads and answers nothing more until it completes, so replies stay in request order.
enum PendingOperation {
    /// A GET that missed memory and may be on disk; `warmUp` for a peer's warm-up GET, answered with the
    /// TTL left before the value and not kept in memory here; `withTTL` for a GET with the `ttl` flag,
    /// answered with the TTL left too.
    case get(key: [UInt8], id: UInt32, warmUp: Bool, lease: Bool = false, withTTL: Bool = false)
    /// A PUT whose disk write waits for room in the bounded disk queue.
    case put(key: [UInt8], value: [UInt8], expiry: UInt32, id: UInt32)
    /// A CLEAR: memory is empty (of the keys under `prefixes`, when there are any); the disk tier empties
    /// (of those keys) behind the queued writes.
    case clear(id: UInt32, prefixes: [[UInt8]], memoryOnlyItems: Int, memoryOnlyBytes: Int)
    /// A GET, PUT or DEL of a key another member owns (`Protocol/CLUSTER.md`, "Forwarding").
    case forward(ForwardRequest)
    /// A CLEAR or STATS with the `cluster` flag: asked of every member (`Protocol/PROTOCOL.md`,
    /// "Cluster-wide CLEAR and STATS"). The request's `owner` is unused.
    case fanOut(ForwardRequest)
    /// A WATCH: the connection becomes a stream of changes (`NodeIOQueue+Watch.swift`). Boxed, so that
    /// the enum every request returns stays small.
    case watch(WatchStart)
}

/// A request on its way to the member that owns its key: the whole frame as received, with the
/// `forwarded` flag set (the request id is replaced by the peer connection's own), and what the client's
/// reply needs back. A class, so that ``PendingOperation`` (and the result every batch of requests
/// returns) stays as small as before forwarding: a larger payload cost measurably more per request in
/// copies and destroys of that result (BENCHMARKS.md, "Figures behind choices in the code").
extension PendingOperation {
    /// The command its duration is counted under (``RequestLatencies``).
    var latencyCommand: LatencyCommand {
        switch self {
        case .get: return .get
        case .put: return .set
        case .clear, .watch: return .other
        case .forward(let request), .fanOut(let request): return LatencyCommand(request.opcode)
        }
    }
}

/// A WATCH's request and id, as ``PendingOperation/watch(_:)`` carries them.
final class WatchStart: Sendable {
    let request: CachetWatchRequest
    let id: UInt32

    init(request: CachetWatchRequest, id: UInt32) {
        self.request = request
        self.id = id
    }
}

final class ForwardRequest: Sendable {
    let frame: [UInt8]
    let opcode: CachetOpcode
    let id: UInt32
    let owner: CachetClusterMember
    /// The frame is not the client's request but an invalidation (a DEL with `forwarded` and
    /// `invalidation`) of its key, sent to confirm a write (`opcode`, PUT or DEL) that a peer forwarded to a
    /// node that routes the key to `owner`: an OK or NOT_FOUND from `owner` acknowledges the write
    /// (`Protocol/CLUSTER.md`, "Forwarding").
    let confirmation: Bool
    /// For a ``confirmation``: the write it confirms, as the peer sent it. Served here if `owner` refuses the
    /// connection (its port is closed, so it serves no copy; this node now counts it down).
    let original: [UInt8]
    /// The request came from a peer and this forward is its second hop (a confirmation, or a request a
    /// holding member passes on): it gets half the forward deadline, so that the peer hears back in time.
    let secondHop: Bool
    /// A warm-up GET to the key's previous owner (``NodeWarmUp``): its OK reply carries the TTL left before
    /// the value, and the client is answered a miss rather than UNAVAILABLE when it fails.
    let warmUp: Bool

    /// A GET with the `ttl` flag: its reply carries the TTL left, so it never shares a plain GET's reply.
    var asksTTL: Bool { frame.count >= 12 && frame[7] & UInt8(CachetRequestFlags.ttl.rawValue) != 0 }

    init(
        frame: [UInt8],
        opcode: CachetOpcode,
        id: UInt32,
        owner: CachetClusterMember,
        confirmation: Bool = false,
        original: [UInt8] = [],
        secondHop: Bool = false,
        warmUp: Bool = false
    ) {
        self.frame = frame
        self.opcode = opcode
        self.id = id
        self.owner = owner
        self.confirmation = confirmation
        self.original = original
        self.secondHop = secondHop
        self.warmUp = warmUp
    }

    /// The opcode of ``frame``: the client's, or DEL for a ``confirmation``.
    var frameOpcode: CachetOpcode { confirmation ? .delete : opcode }
}
