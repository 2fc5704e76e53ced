import CachetWire

/// A request that waits for something outside the loop: the disk queue, or the member it is forwarded to.
/// The connection reads and answers nothing more until it completes, so replies stay in request order.
enum PendingOperation {
    /// A GET that missed memory and may be on disk; `warmUp` for a peer's warm-up GET, answered with the
    /// TTL left before the value and not kept in memory here; `withTTL` for a GET with the `ttl` flag,
    /// answered with the TTL left too; `inFrames` for a GET with the `frames` flag, whose value may be
    /// answered in several frames (``ValueFrames``); `item` for a GET with the `item` flag, answered with
    /// the item's flags and CAS unique too.
    case get(
        key: [UInt8],
        id: UInt32,
        warmUp: Bool,
        lease: Bool = false,
        withTTL: Bool = false,
        inFrames: Bool = false,
        item: Bool = false
    )
    /// A GET with the `range` flag that missed memory and may be on disk: answered with that part of the
    /// value. Boxed, so that the enum every request returns stays as small as it was.
    indirect case rangedGet(key: [UInt8], id: UInt32, range: CachetValueRange)
    /// A part of a value sent in parts (a PUT with the `part` flag): taken by the node's uploads and written
    /// to the upload's staging file on the disk queue, the value stored once it is the last. Boxed.
    indirect case uploadPart(UploadPartRequest)
    /// A PUT with the `item` flag that reads the item, which memory missed and the disk tier may hold: read
    /// there, then done. Boxed.
    indirect case itemWrite(ItemWriteRequest)
    /// A PUT with the `item` flag, stored in memory, whose disk write waits for room in the disk queue. Boxed.
    indirect case itemPut(ItemDiskWrite)
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
    /// A WATCH: the connection becomes a stream of changes (``ConnectionWatching``). Boxed, so that
    /// the enum every request returns stays small.
    case watch(WatchStart)
}

/// A part of a value sent in parts, copied out of the connection's input for the disk queue.
struct UploadPartRequest {
    let key: [UInt8]
    /// Its upload, length and offset (`bytes` locates the bytes in the frame they came in, no longer held).
    let part: CachetUploadPart
    let bytes: [UInt8]
    let ttl: UInt32
    let expiry: UInt32
    let id: UInt32
}

extension PendingOperation {
    /// The command its duration is counted under (``RequestLatencies``).
    var latencyCommand: LatencyCommand {
        switch self {
        case .get, .rangedGet: return .get
        case .put, .uploadPart, .itemWrite, .itemPut: return .set
        case .clear, .watch: return .other
        case .forward(let request), .fanOut(let request): return LatencyCommand(request.opcode)
        }
    }

    /// Whether it is a GET that went to the disk tier.
    var isGet: Bool { diskReadKey != nil }

    /// The key a GET that went to the disk tier reads (plain, warm-up, with the TTL or of a range); nil for
    /// anything else.
    var diskReadKey: [UInt8]? {
        switch self {
        case .get(let key, _, _, _, _, _, _), .rangedGet(let key, _, _): return key
        default: return nil
        }
    }
}
