import CachetIO
import CachetStore
import CachetWire

/// The replies to requests that went to the disk tier (``PendingOperation``), written on the loop's queue
/// once the disk queue has answered: a GET's read (kept in memory on a hit), a PUT whose write waited for
/// room in the queue, a CLEAR once the tier is empty.
///
/// Made per use from the loop's commands.
struct DiskCompletions {
    let commands: NodeCommands

    /// Answers a GET that went to the disk tier (``PendingOperation/get(key:id:warmUp:lease:withTTL:)``) with
    /// what was read: a peer's warm-up GET as ``PeerValues/completeWarmUpRead(id:entry:counters:output:now:)``,
    /// a client's as ``completeGet(key:id:entry:lease:withTTL:output:now:)``; a value too long for one reply
    /// frame (not read) as TOO_LARGE.
    func completeGet(
        _ operation: PendingOperation,
        entry: CachetDiskEntry?,
        output: inout CachetByteBuffer,
        now: UInt32
    ) {
        switch operation {
        case .get(let key, let id, let warmUp, let lease, let withTTL, _, let item):
            if let entry, entry.oversizedLength > 0 {
                // Too long for one reply frame: not read. A warm-up takes it for a miss.
                guard !warmUp else {
                    return PeerValues.completeWarmUpRead(
                        id: id,
                        entry: nil,
                        counters: commands.counters,
                        output: &output,
                        now: now
                    )
                }
                RequestCounters.bump(commands.counters.hits)
                RequestCounters.bump(commands.counters.diskHits)
                return appendMessage(
                    "the value is \(entry.oversizedLength) bytes, more than one reply frame holds (--max-frame): ask "
                        + "with the frames flag to take it in several frames, or read it by ranges (GET with the range flag)",
                    status: .tooLarge,
                    opcode: .get,
                    id: id,
                    to: &output
                )
            }
            if item {
                return completeItemGet(
                    key: key,
                    id: id,
                    entry: entry,
                    lease: lease,
                    withTTL: withTTL,
                    output: &output,
                    now: now
                )
            }
            if warmUp {
                let counters = commands.counters
                PeerValues.completeWarmUpRead(id: id, entry: entry, counters: counters, output: &output, now: now)
            } else {
                completeGet(key: key, id: id, entry: entry, lease: lease, withTTL: withTTL, output: &output, now: now)
            }
        default:
            return
        }
    }

    /// Answers a client's GET that went to disk, promoting a hit into memory.
    func completeGet(
        key: [UInt8],
        id: UInt32,
        entry: CachetDiskEntry?,
        lease: Bool = false,
        withTTL: Bool = false,
        output: inout CachetByteBuffer,
        now: UInt32
    ) {
        key.withUnsafeBytes { key in
            guard let entry, entry.expiry == 0 || entry.expiry > now else {
                RequestCounters.bump(commands.counters.misses)
                if lease {
                    appendLeaseMiss(commands.acquireLease(key), id: id, to: &output)
                } else {
                    appendReply(opcode: .get, status: .notFound, id: id, to: &output)
                }
                return
            }
            commands.promote(key, entry, now: now)
            entry.value.withUnsafeBytes { value in
                if withTTL {
                    appendValueWithTTL(value, expiry: entry.expiry, id: id, output: &output, now: now)
                } else {
                    appendReply(opcode: .get, status: .ok, id: id, body: value, to: &output)
                }
            }
        }
    }

    /// Answers a GET with the `item` flag that went to disk: the item, kept in memory with its fields.
    private func completeItemGet(
        key: [UInt8],
        id: UInt32,
        entry: CachetDiskEntry?,
        lease: Bool,
        withTTL: Bool,
        output: inout CachetByteBuffer,
        now: UInt32
    ) {
        key.withUnsafeBytes { key in
            guard let entry, entry.expiry == 0 || entry.expiry > now else {
                RequestCounters.bump(commands.counters.misses)
                if lease { return appendLeaseMiss(commands.acquireLease(key), id: id, to: &output) }
                return appendReply(opcode: .get, status: .notFound, id: id, to: &output)
            }
            let fields = commands.promoteItem(key, entry, now: now)
            let ttlLeft: UInt32? = withTTL ? (entry.expiry == 0 ? 0 : entry.expiry &- now) : nil
            entry.value.withUnsafeBytes {
                appendItem(
                    $0,
                    flags: fields.flags,
                    cas: fields.cas,
                    ttlLeft: ttlLeft,
                    opcode: .get,
                    id: id,
                    output: &output
                )
            }
        }
    }

    /// Answers a GET of a range that went to the disk tier (``PendingOperation/rangedGet(key:id:range:)``)
    /// with what was read: the range's bytes, never kept in memory. A range long enough goes straight to the
    /// socket (`directSend`, while nothing else waits in `output`) from the buffer it was read into, as a
    /// binary reply, or as an HTTP response's bytes when the connection is `http`'s.
    func completeRange(
        _ read: CachetDiskRange,
        id: UInt32,
        output: inout CachetByteBuffer,
        directSend: DirectSend? = nil,
        http: HTTPSession? = nil
    ) {
        switch read {
        case .miss:
            RequestCounters.bump(commands.counters.misses)
            appendReply(opcode: .get, status: .notFound, id: id, to: &output)
        case .unsatisfiable(let total, let tag):
            RequestCounters.bump(commands.counters.hits)
            appendRangeNotSatisfiable(total: total, tag: tag, id: id, output: &output)
        case .bytes(let total, let tag, _, let bytes):
            RequestCounters.bump(commands.counters.hits)
            RequestCounters.bump(commands.counters.diskHits)
            bytes.withUnsafeBytes { bytes in
                if let directSend, bytes.count >= RequestProcessor.directSendThreshold, output.readableBytes == 0 {
                    if let http {
                        if http.sendRangeReply(total: total, tag: tag, bytes: bytes, output: &output, send: directSend)
                        {
                            return
                        }
                        appendRangeReply(total: total, tag: tag, bytes: bytes, id: id, output: &output)
                        return
                    }
                    let prefix = (UInt64(total).bigEndian, tag.bigEndian)
                    directSend.sendReply(id: id, prefix: prefix, value: bytes, output: &output)
                } else {
                    appendRangeReply(total: total, tag: tag, bytes: bytes, id: id, output: &output)
                }
            }
        }
    }

    /// Answers a PUT whose disk write has been queued.
    func completePut(id: UInt32, output: inout CachetByteBuffer) {
        appendReply(opcode: .put, status: .ok, id: id, to: &output)
    }

    /// Answers a PUT the disk journal could not record with SERVER_ERROR. The new value leaves memory too,
    /// so that what is served stays what was last acknowledged.
    func refusePut(key: [UInt8], id: UInt32, error: CachetStoreError, output: inout CachetByteBuffer, now: UInt32) {
        commands.forgetRefusedPut(key: key, now: now)
        appendMessage(error.message, status: .serverError, opcode: .put, id: id, to: &output)
    }

    /// Answers a CLEAR once the disk tier is empty.
    func completeClear(
        id: UInt32,
        memoryOnlyItems: Int,
        memoryOnlyBytes: Int,
        disk: CachetDiskClearResult,
        output: inout CachetByteBuffer
    ) {
        if let failure = disk.failure {
            appendMessage(failure.message, status: .serverError, opcode: .clear, id: id, to: &output)
            return
        }
        appendClearReply(id: id, items: memoryOnlyItems + disk.items, bytes: memoryOnlyBytes + disk.bytes, to: &output)
    }
}
