import CachetIO
import CachetStore
import CachetWire

/// Completing operations that went to the disk tier, on the loop's queue.
extension RequestProcessor {
    /// Answers a GET that went to disk, promoting a hit into memory.
    func completeGet(
        key: [UInt8],
        id: UInt32,
        entry: CachetDiskEntry?,
        lease: Bool = false,
        withTTL: Bool = false,
        output: inout CachetByteBuffer,
        now: UInt32
    ) {
        guard let entry, entry.expiry == 0 || entry.expiry > now else {
            RequestCounters.bump(counters.misses)
            if lease {
                key.withUnsafeBytes { appendLeaseMiss($0, id: id, to: &output) }
            } else {
                appendReply(opcode: .get, status: .notFound, id: id, to: &output)
            }
            return
        }
        RequestCounters.bump(counters.hits)
        RequestCounters.bump(counters.diskHits)
        key.withUnsafeBytes { key in
            entry.value.withUnsafeBytes { value in
                _ = store.put(key: key, value: value, expiry: entry.expiry, now: now)
                // A PUT or DEL of the key since the read was queued may have been overwritten just now.
                if let disk, !disk.worker.mayKeepPromotion(key: key, of: entry) {
                    _ = store.remove(key: key, now: now)
                }
                if withTTL {
                    appendValueWithTTL(value, expiry: entry.expiry, id: id, output: &output, now: now)
                } else {
                    appendReply(opcode: .get, status: .ok, id: id, body: value, to: &output)
                }
            }
        }
    }

    /// Answers a GET that went to the disk tier (``PendingOperation/get(key:id:warmUp:lease:withTTL:)``) with
    /// what was read: a peer's warm-up GET as ``completeWarmUpRead(id:entry:output:now:)``, a client's as
    /// ``completeGet(key:id:entry:lease:withTTL:output:now:)``.
    func completeDiskGet(
        _ operation: PendingOperation,
        entry: CachetDiskEntry?,
        output: inout CachetByteBuffer,
        now: UInt32
    ) {
        guard case .get(let key, let id, let warmUp, let lease, let withTTL) = operation else { return }
        if warmUp {
            completeWarmUpRead(id: id, entry: entry, output: &output, now: now)
        } else {
            completeGet(key: key, id: id, entry: entry, lease: lease, withTTL: withTTL, output: &output, now: now)
        }
    }

    /// Answers a PUT whose disk write has been queued.
    func completePut(id: UInt32, output: inout CachetByteBuffer) {
        appendReply(opcode: .put, status: .ok, id: id, to: &output)
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

    func appendClearReply(id: UInt32, items: Int, bytes: Int, to output: inout CachetByteBuffer) {
        let body = CachetClearResult(items: UInt64(items), bytes: UInt64(bytes)).encoded
        body.withUnsafeBytes { appendReply(opcode: .clear, status: .ok, id: id, body: $0, to: &output) }
    }
}
