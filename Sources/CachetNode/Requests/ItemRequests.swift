import CachetIO
import CachetWire

/// The binary protocol's GETs and PUTs with the `item` flag (`Protocol/PROTOCOL.md`, "Items: flags, CAS and
/// conditional writes"), decoded and answered for ``RequestProcessor``, which routes them first as any GET
/// or PUT; what they do is the command layer's (``NodeCommands/writeItem(_:mode:flags:cas:data:ttl:now:diskChecked:diskEntry:)``).
struct ItemRequests {
    let commands: NodeCommands

    /// A GET with the `item` flag (`Protocol/PROTOCOL.md`, "Items: flags, CAS and conditional writes"): the
    /// item's flags and CAS unique (one given now to an item without) before its value, and with `ttl` the
    /// TTL it has left after them; with `lease`, a miss is answered as a GET with `lease` (a lease granted or
    /// held). Not warmed up from a previous owner.
    func get(
        _ key: UnsafeRawBufferPointer,
        flags: UInt16,
        id: UInt32,
        output: inout CachetByteBuffer,
        outputCapacityLimit: Int,
        noRoom: inout Bool,
        now: UInt32,
        directSend: DirectSend? = nil
    ) throws(CachetWireError) -> PendingOperation? {
        let withTTL = flags & CachetRequestFlags.ttl.rawValue != 0
        let lease = flags & CachetRequestFlags.lease.rawValue != 0
        let found = commands.lookUpItem(key, now: now) { value, expiry, fields -> Bool in
            guard RequestProcessor.replyFits(value.count, extra: 16, limit: outputCapacityLimit, output: output) else {
                return false
            }
            // A large value for a memcached `get`: its VALUE line and data straight to the socket, from the
            // entry (under the shard's lock, as a native GET's), instead of a native reply copied and
            // translated.
            if let directSend, value.count >= MemcacheSession.directValueThreshold, !withTTL,
                let session = directSend.memcache,
                session.sendValue(value, flags: fields.flags, cas: fields.cas, output: &output, send: directSend)
            {
                return true
            }
            appendItem(
                value,
                flags: fields.flags,
                cas: fields.cas,
                ttlLeft: withTTL ? (expiry == 0 ? 0 : expiry &- now) : nil,
                opcode: .get,
                id: id,
                output: &output
            )
            return true
        }
        switch found {
        case true?: return nil
        case false?:
            noRoom = true
            return nil
        case nil:
            RequestCounters.bump(commands.counters.gets)
            if commands.afterMemoryMiss(key, now: now) {
                return .get(key: Array(key), id: id, warmUp: false, lease: lease, withTTL: withTTL, item: true)
            }
            if lease {
                appendLeaseMiss(commands.acquireLease(key), id: id, to: &output)
            } else {
                appendReply(opcode: .get, status: .notFound, id: id, to: &output)
            }
            return nil
        }
    }

    /// Refuses a request whose flags include one of `excluded`, which the `item` flag does not combine with.
    private static func refuse(_ flags: UInt16, _ excluded: CachetRequestFlags) throws(CachetWireError) {
        guard flags & excluded.rawValue == 0 else {
            throw CachetWireError(
                code: .malformedBody,
                message: "the item flag does not combine with lease, ttl, range or part"
            )
        }
    }

    /// A PUT with the `item` flag: one of memcached's storage, arithmetic or touch commands on the item
    /// (``NodeCommands/writeItem(_:mode:flags:cas:data:ttl:now:diskChecked:diskEntry:)``).
    func put(
        _ put: CachetPutBody,
        flags: UInt16,
        in buffer: UnsafeRawBufferPointer,
        id: UInt32,
        output: inout CachetByteBuffer,
        now: UInt32
    ) throws(CachetWireError) -> PendingOperation? {
        try Self.refuse(flags, [.lease, .part])
        let write = try CachetItemWrite.decode(in: buffer, value: put.value)
        let key = UnsafeRawBufferPointer(rebasing: buffer[put.key])
        let data = UnsafeRawBufferPointer(rebasing: buffer[write.data])
        let outcome = commands.writeItem(
            key,
            mode: write.mode,
            flags: write.flags,
            cas: write.cas,
            data: data,
            ttl: put.ttl,
            now: now,
            diskChecked: false,
            newCAS: write.newCAS
        )
        switch outcome {
        case .answered(let reply):
            if case .refused(.badRequest, _) = reply { RequestCounters.bump(commands.counters.badRequests) }
            appendItemReply(reply, id: id, output: &output)
            return nil
        case .readDiskFirst:
            return .itemWrite(
                ItemWriteRequest(
                    key: Array(key),
                    mode: write.mode,
                    flags: write.flags,
                    cas: write.cas,
                    data: Array(data),
                    ttl: put.ttl,
                    id: id,
                    newCAS: write.newCAS
                )
            )
        case .waitingForDisk(let waiting):
            return .itemPut(waiting.replacing(id: id))
        case .failed(let error):
            appendMessage(error.message, status: .serverError, opcode: .put, id: id, to: &output)
            return nil
        }
    }
}
