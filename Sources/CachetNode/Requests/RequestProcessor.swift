import CachetCluster
import CachetIO
import CachetStore
import CachetWire

#if canImport(Glibc)
import Glibc
#endif

/// What processing the buffered input ended with.
enum ProcessingResult {
    /// Every whole frame was answered; the input holds at most a partial frame of `frameLength` bytes
    /// (0 when not even its length prefix has arrived).
    case needMoreBytes(frameLength: Int)
    /// The output passed its high-water mark; the rest of the input waits until it drains.
    case outputFull
    /// The next reply does not fit the memory the connection may still take (``ConnectionMemory``); its
    /// request stays at the head of the input until memory is returned.
    case memoryFull
    /// A framing error was answered; the connection closes once the reply is sent.
    case closeAfterReply
    /// A request needs the disk queue, a fan-out or a forward; the connection waits for the disk or the
    /// fan-out before answering anything else, and goes on past a forward (`NodeIOQueue.processHeld`).
    case suspended(PendingOperation)
    /// The head frame is a PUT of a large value whose remaining bytes are to be read straight into its
    /// entry; the buffered part has been copied there and the input is empty.
    case receivingValue(DirectPut)
    /// The request limit was reached with whole frames left in the input: the connection gives others a
    /// turn and is processed again after them.
    case yielded
}

/// Turns request frames into replies: decoding, dispatch to the store, reply encoding. No I/O.
///
/// One processor serves one event loop; it is called only on that loop's queue.
struct RequestProcessor {
    let store: CachetMemoryStore
    let disk: DiskTier?
    let counters: RequestCounters
    let maximumPayloadLength: Int
    /// The STATS body; `true` for the whole of it, `false` without the cluster's member list (a user
    /// that is not an admin, on a node with users).
    let statistics: @Sendable (Bool) -> String
    /// The budget shared by every connection's buffers and large PUTs still arriving.
    let connectionMemory: ConnectionMemory
    /// The cluster parts a request may need (routing, health and stand-ins, the hold); nil on a node that
    /// is a cluster of one, which serves every key. One reference, so that a node without a cluster file
    /// carries a single nil field: three cost measurably more in copies (BENCHMARKS.md, "Figures behind
    /// choices in the code").
    let cluster: ClusterRouting?
    /// Whether ``cluster`` is set: the one test a request pays on a node that never forwards (testing the
    /// optional reference itself cost more: BENCHMARKS.md, "Figures behind choices in the code").
    let forwards: Bool
    /// The node's users (`--auth-file`); nil: every client may send every request.
    let auth: NodeAuth?
    /// The leases of read-through, shared by every loop.
    let leases: NodeLeases
    /// The changes WATCH streams, shared by every loop.
    let watches: NodeWatchHub
    /// This loop's copy of the watched prefixes (read without a lock on the loop).
    let watchView: WatchIndexView

    init(
        store: CachetMemoryStore,
        disk: DiskTier?,
        counters: RequestCounters,
        maximumPayloadLength: Int,
        statistics: @escaping @Sendable (Bool) -> String,
        connectionMemory: ConnectionMemory,
        cluster: ClusterRouting? = nil,
        auth: NodeAuth? = nil,
        leases: NodeLeases = NodeLeases(lifetime: 10),
        watches: NodeWatchHub = NodeWatchHub(ringLimit: 1 << 20, retain: 60, sendLimit: 1 << 20),
        watchView: WatchIndexView = WatchIndexView()
    ) {
        self.auth = auth
        self.leases = leases
        self.watches = watches
        self.watchView = watchView
        self.store = store
        self.disk = disk
        self.counters = counters
        self.maximumPayloadLength = maximumPayloadLength
        self.statistics = statistics
        self.connectionMemory = connectionMemory
        self.cluster = cluster
        forwards = cluster != nil
    }

    /// Answers every whole frame in `input`, appending the replies to `output`.
    ///
    /// - Parameters:
    ///   - input: the connection's received bytes; whole frames are consumed.
    ///   - output: the connection's pending replies.
    ///   - outputLimit: stop once `output` holds more than this many bytes.
    ///   - outputCapacityLimit: the most `output` may hold once a GET's reply is queued (its capacity plus
    ///     what the memory budget still allows); a reply that would pass it is not produced
    ///     (`.memoryFull`). Other replies are small and not limited.
    ///   - now: the store's clock, read once per batch.
    ///   - requestLimit: answer at most this many requests, then stop (`.yielded`) if another whole frame
    ///     waits.
    /// - Returns: why processing stopped.
    func process(
        input: inout CachetByteBuffer,
        output: inout CachetByteBuffer,
        outputLimit: Int,
        outputCapacityLimit: Int = .max,
        now: UInt32,
        access: inout ConnectionAccess,
        tally: inout RequestTally,
        directSend: DirectSend? = nil,
        requestLimit: Int = .max
    ) -> ProcessingResult {
        var answered = 0
        while true {
            if output.readableBytes > outputLimit { return .outputFull }
            let region = input.wholeRegion
            let frame: CachetFrame?
            do {
                frame = try CachetFrameDecoder.decodeFrame(
                    in: region,
                    at: input.readIndex,
                    maximumPayloadLength: maximumPayloadLength
                )
            } catch {
                RequestCounters.bump(counters.badRequests)
                appendError(error, opcode: .none, id: 0, to: &output)
                input.moveReadIndex(to: input.writeIndex)
                return .closeAfterReply
            }
            guard let frame else {
                let available = input.readableBytes
                if available >= CachetProtocol.lengthPrefixSize {
                    let length = Int(region.loadUnaligned(fromByteOffset: input.readIndex, as: UInt32.self).bigEndian)
                    if length >= Self.directPutThreshold, access.isOpen,
                        let direct = startDirectPut(in: region, at: input.readIndex, payloadLength: length, now: now)
                    {
                        // Every buffered byte belongs to this frame and has been copied into the entry.
                        input.moveReadIndex(to: input.writeIndex)
                        return .receivingValue(direct)
                    }
                    return .needMoreBytes(frameLength: CachetProtocol.lengthPrefixSize + length)
                }
                return .needMoreBytes(frameLength: 0)
            }
            if answered == requestLimit { return .yielded }
            answered &+= 1
            tally.count(frame.header.opcode)
            var noRoom = false
            if !access.isOpen {
                // A node with users: AUTH, or the user's rights checked, before anything is served.
                guard authorize(frame, in: region, access: &access, output: &output) else {
                    input.moveReadIndex(to: frame.end)
                    if access.closeRequested {
                        input.moveReadIndex(to: input.writeIndex)
                        return .closeAfterReply
                    }
                    continue
                }
            }
            let pending = dispatch(
                frame,
                in: region,
                output: &output,
                outputCapacityLimit: outputCapacityLimit,
                noRoom: &noRoom,
                now: now,
                directSend: directSend,
                access: access
            )
            if noRoom { return .memoryFull }
            input.moveReadIndex(to: frame.end)
            if let pending { return .suspended(pending) }
        }
    }

    /// Answers one request frame, or says what it waits for. Sets `noRoom` instead when the reply does
    /// not fit the memory the connection may take; the frame is then not answered.
    @inline(__always)
    private func dispatch(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        output: inout CachetByteBuffer,
        outputCapacityLimit: Int,
        noRoom: inout Bool,
        now: UInt32,
        directSend: DirectSend?,
        access: borrowing ConnectionAccess
    ) -> PendingOperation? {
        let header = frame.header
        do {
            try CachetFrameDecoder.validateRequestHeader(header)
            switch header.opcode {
            case .get:
                let key = try CachetBodyDecoder.decodeKey(in: buffer, body: frame.body)
                var warmable = false
                if forwards {
                    let warmUp = CachetRequestFlags.forwarded.rawValue | CachetRequestFlags.warmUp.rawValue
                    if header.flags & warmUp == warmUp {
                        return serveWarmUp(
                            UnsafeRawBufferPointer(rebasing: buffer[key]),
                            id: header.id,
                            output: &output,
                            now: now
                        )
                    }
                    switch route(frame, key: key, in: buffer, output: &output) {
                    case .here: break
                    case .answered: return nil
                    case .pending(let operation): return operation
                    }
                    warmable = header.flags & CachetRequestFlags.lastHop.rawValue == 0
                }
                if header.flags & CachetRequestFlags.ttl.rawValue != 0 {
                    return getWithTTL(
                        UnsafeRawBufferPointer(rebasing: buffer[key]),
                        id: header.id,
                        output: &output,
                        outputCapacityLimit: outputCapacityLimit,
                        noRoom: &noRoom,
                        now: now,
                        lease: header.flags & CachetRequestFlags.lease.rawValue != 0
                    )
                }
                return get(
                    UnsafeRawBufferPointer(rebasing: buffer[key]),
                    id: header.id,
                    output: &output,
                    outputCapacityLimit: outputCapacityLimit,
                    noRoom: &noRoom,
                    now: now,
                    directSend: directSend,
                    warmable: warmable,
                    lease: header.flags & CachetRequestFlags.lease.rawValue != 0
                )
            case .put:
                let leased = header.flags & CachetRequestFlags.lease.rawValue != 0
                let (put, token) = try CachetBodyDecoder.decodePut(in: buffer, body: frame.body, leased: leased)
                if forwards {
                    cluster.unsafelyUnwrapped.warmUp?.noteWrite(UnsafeRawBufferPointer(rebasing: buffer[put.key]))
                    switch route(frame, key: put.key, in: buffer, output: &output) {
                    case .here: break
                    case .answered: return nil
                    case .pending(let operation): return operation
                    }
                }
                guard leased else { return self.put(put, in: buffer, id: header.id, output: &output, now: now) }
                return leasedPut(put, token: token, in: buffer, id: header.id, output: &output, now: now)
            case .delete:
                let key = try CachetBodyDecoder.decodeKey(in: buffer, body: frame.body)
                if forwards {
                    cluster.unsafelyUnwrapped.warmUp?.noteWrite(UnsafeRawBufferPointer(rebasing: buffer[key]))
                    switch route(frame, key: key, in: buffer, output: &output) {
                    case .here: break
                    case .answered: return nil
                    case .pending(let operation): return operation
                    }
                }
                delete(UnsafeRawBufferPointer(rebasing: buffer[key]), id: header.id, output: &output, now: now)
            case .clear:
                let requested = try CachetBodyDecoder.decodeClear(in: buffer, body: frame.body)
                // A user limited to key prefixes clears only keys under them (checked by `authorize`).
                let prefixes = access.clearScope(requested: requested)
                if forwards {
                    if let fanOut = fanOut(frame, in: buffer, clearPrefixes: prefixes == requested ? nil : prefixes) {
                        return fanOut
                    }
                    noteInvalidation(header)
                    cluster.unsafelyUnwrapped.warmUp?.noteClear()
                }
                return clear(prefixes: prefixes, id: header.id, output: &output)
            case .watch:
                return .watch(
                    WatchStart(request: try CachetWatchRequest(decoding: buffer, body: frame.body), id: header.id)
                )
            case .unwatch:
                // Not watching: nothing to end.
                try CachetBodyDecoder.decodeEmpty(body: frame.body)
                appendReply(opcode: .unwatch, status: .ok, id: header.id, to: &output)
            case .stats:
                try CachetBodyDecoder.decodeEmpty(body: frame.body)
                if forwards, let fanOut = fanOut(frame, in: buffer) { return fanOut }
                var json = statistics(access.mayReadMembers)
                json.withUTF8 {
                    appendReply(
                        opcode: .stats,
                        status: .ok,
                        id: header.id,
                        body: UnsafeRawBufferPointer($0),
                        to: &output
                    )
                }
            case .auth:
                // A node with users answers AUTH before it gets here (``authorize``).
                _ = try CachetBodyDecoder.decodeAuth(in: buffer, body: frame.body)
                appendMessage(
                    "this node has no users (no --auth-file): every client may send every request",
                    status: .badRequest,
                    opcode: .auth,
                    id: header.id,
                    to: &output
                )
            default:
                let leaving = CachetRequestFlags.forwarded.rawValue | CachetRequestFlags.leaving.rawValue
                if forwards, header.flags & leaving == leaving {
                    memberLeaving(frame, in: buffer, output: &output)
                    return nil
                }
                try CachetBodyDecoder.decodeEmpty(body: frame.body)
                appendReply(opcode: .ping, status: .ok, id: header.id, to: &output)
            }
        } catch {
            RequestCounters.bump(counters.badRequests)
            appendError(error, opcode: header.opcode, id: header.id, to: &output)
        }
        return nil
    }

    @inline(__always)
    private func get(
        _ key: UnsafeRawBufferPointer,
        id: UInt32,
        output: inout CachetByteBuffer,
        outputCapacityLimit: Int,
        noRoom: inout Bool,
        now: UInt32,
        directSend: DirectSend?,
        warmable: Bool = false,
        lease: Bool = false
    ) -> PendingOperation? {
        let hit: Bool? = store.withValue(forKey: key, now: now) { value, _ in
            // Room for the whole reply in the buffer as it is, or by growing it within the budget: a
            // direct send may leave all of it to be queued. (Values below the threshold are never held
            // back: their replies fit a connection's initial buffer, or grow it by little.)
            if value.count >= Self.budgetCheckThreshold
                && value.count + CachetProtocol.frameOverhead > outputCapacityLimit - output.readableBytes
            {
                return false
            }
            if let directSend, value.count >= Self.directSendThreshold, output.readableBytes == 0 {
                appendReplyDirectly(id: id, value: value, output: &output, directSend: directSend)
            } else {
                appendReply(opcode: .get, status: .ok, id: id, body: value, to: &output)
            }
            return true
        }
        if let hit {
            guard hit else {
                noRoom = true
                return nil
            }
            RequestCounters.bump(counters.gets)
            RequestCounters.bump(counters.hits)
            return nil
        }
        RequestCounters.bump(counters.gets)
        // A key this node owns since a membership change and never wrote since is asked of its previous
        // owner first (its disk tier cannot hold a newer value).
        // (Not for a GET with the lease flag: its miss is granted a lease here, and the one caller that holds
        // it loads the value, so a membership change costs a key at most one load.)
        if warmable && !lease, let operation = warmUpRequest(key, id: id) { return operation }
        return missedMemory(key, id: id, lease: lease, withTTL: false, output: &output, now: now)
    }

    /// A GET that missed memory: to the disk queue only when the key may be there, counting the writes
    /// queued but not applied (the serial queue then answers after them, in order); else a miss, with a
    /// lease reply for a GET with the `lease` flag.
    private func missedMemory(
        _ key: UnsafeRawBufferPointer,
        id: UInt32,
        lease: Bool,
        withTTL: Bool,
        output: inout CachetByteBuffer,
        now: UInt32
    ) -> PendingOperation? {
        if let disk, disk.worker.mayHold(key: key, now: now) {
            return .get(key: Array(key), id: id, warmUp: false, lease: lease, withTTL: withTTL)
        }
        RequestCounters.bump(counters.misses)
        if lease {
            appendLeaseMiss(key, id: id, to: &output)
        } else {
            appendReply(opcode: .get, status: .notFound, id: id, to: &output)
        }
        return nil
    }

    /// A GET with the `ttl` flag (`Protocol/PROTOCOL.md`, "GET with the TTL left"): ``get(_:id:output:outputCapacityLimit:noRoom:now:directSend:warmable:lease:)``
    /// with the TTL left before the value, kept apart so that a plain GET pays one flag test for it. Not
    /// warmed up from a previous owner (it is answered from the tiers here, as a GET with `lease` is), and
    /// never sent directly (its reply is small beside the values that are).
    private func getWithTTL(
        _ key: UnsafeRawBufferPointer,
        id: UInt32,
        output: inout CachetByteBuffer,
        outputCapacityLimit: Int,
        noRoom: inout Bool,
        now: UInt32,
        lease: Bool
    ) -> PendingOperation? {
        let hit: Bool? = store.withValue(forKey: key, now: now) { value, expiry in
            if value.count >= Self.budgetCheckThreshold
                && value.count + CachetProtocol.frameOverhead + 4 > outputCapacityLimit - output.readableBytes
            {
                return false
            }
            appendValueWithTTL(value, expiry: expiry, id: id, output: &output, now: now)
            return true
        }
        if let hit {
            // No room: the frame is not answered now (nor counted), and is read again once there is.
            guard hit else {
                noRoom = true
                return nil
            }
            RequestCounters.bump(counters.gets)
            RequestCounters.bump(counters.hits)
            return nil
        }
        RequestCounters.bump(counters.gets)
        return missedMemory(key, id: id, lease: lease, withTTL: true, output: &output, now: now)
    }

    /// The NOT_FOUND of a GET with the `lease` flag: with a lease on the key for the caller, or, when
    /// another caller holds it, how long to wait (`Protocol/PROTOCOL.md`, "Leases").
    func appendLeaseMiss(_ key: UnsafeRawBufferPointer, id: UInt32, to output: inout CachetByteBuffer) {
        let reply: CachetLeaseReply
        switch leases.acquire(key) {
        case .granted(let token): reply = CachetLeaseReply(token: token, waitMilliseconds: 0)
        case .held: reply = CachetLeaseReply(token: 0, waitMilliseconds: NodeLeases.waitMilliseconds)
        case .none:
            appendReply(opcode: .get, status: .notFound, id: id, to: &output)
            return
        }
        reply.encoded.withUnsafeBytes { appendReply(opcode: .get, status: .notFound, id: id, body: $0, to: &output) }
    }

    /// A PUT with a lease token: stored as any PUT while its lease stands, else NOT_STORED.
    private func leasedPut(
        _ body: CachetPutBody,
        token: UInt64,
        in buffer: UnsafeRawBufferPointer,
        id: UInt32,
        output: inout CachetByteBuffer,
        now: UInt32
    ) -> PendingOperation? {
        let key = UnsafeRawBufferPointer(rebasing: buffer[body.key])
        let stored = leases.complete(key, token: token) {
            put(body, in: buffer, id: id, output: &output, now: now, invalidatingLease: false)
        }
        guard let stored else {
            appendMessage(
                CachetLeaseReply.notStoredMessage,
                status: .notStored,
                opcode: .put,
                id: id,
                to: &output
            )
            return nil
        }
        return stored
    }

    @inline(__always)
    private func put(
        _ put: CachetPutBody,
        in buffer: UnsafeRawBufferPointer,
        id: UInt32,
        output: inout CachetByteBuffer,
        now: UInt32,
        invalidatingLease: Bool = true
    ) -> PendingOperation? {
        RequestCounters.bump(counters.puts)
        let expiry = Self.expiry(ttl: put.ttl, now: now)
        let key = UnsafeRawBufferPointer(rebasing: buffer[put.key])
        let value = UnsafeRawBufferPointer(rebasing: buffer[put.value])
        // Before the store changes: a lease granted before this write must not store a value loaded before it.
        if invalidatingLease { leases.invalidate(key) }
        // Before memory changes, so that a disk read queued earlier does not put the older value back.
        disk?.worker.beginWrite(key: key)
        let outcome = store.put(key: key, value: value, expiry: expiry, now: now)
        guard let disk else {
            if outcome == .stored {
                watches.publish(.put, key: key, value: value, ttl: put.ttl, view: watchView)
                appendReply(opcode: .put, status: .ok, id: id, to: &output)
            } else {
                appendMessage(
                    "entry of \(key.count + value.count) bytes does not fit --memory-limit \(store.statistics.memoryLimit)",
                    status: .tooLarge,
                    opcode: .put,
                    id: id,
                    to: &output
                )
            }
            return nil
        }
        if outcome == .tooLarge {
            // The disk limit must also hold the entry file's header, even for an incompressible value.
            guard key.count + value.count <= disk.store.maximumEntryBytes else {
                disk.worker.abandonWrite(key: Array(key))
                appendMessage(
                    "entry of \(key.count + value.count) bytes does not fit --memory-limit \(store.statistics.memoryLimit) "
                        + "nor --disk-limit \(disk.limit) (at most \(disk.store.maximumEntryBytes) bytes of key and value)",
                    status: .tooLarge,
                    opcode: .put,
                    id: id,
                    to: &output
                )
                return nil
            }
            // Stored on disk only; an older copy in memory must not shadow it.
            _ = store.remove(key: key, now: now)
        }
        let keyBytes = Array(key)
        let valueBytes = Array(value)
        switch disk.worker.submitPut(key: keyBytes, value: valueBytes, expiry: expiry) {
        case .queued:
            watches.publish(.put, key: key, value: value, ttl: put.ttl, view: watchView)
            appendReply(opcode: .put, status: .ok, id: id, to: &output)
            return nil
        case .full:
            watches.publish(.put, key: key, value: value, ttl: put.ttl, view: watchView)
            return .put(key: keyBytes, value: valueBytes, expiry: expiry, id: id)
        case .refused(let error):
            refusePut(key: keyBytes, id: id, error: error, output: &output, now: now)
            return nil
        }
    }

    /// Answers a PUT the disk journal could not record with SERVER_ERROR. The new value leaves memory too,
    /// so that what is served stays what was last acknowledged.
    func refusePut(key: [UInt8], id: UInt32, error: CachetStoreError, output: inout CachetByteBuffer, now: UInt32) {
        _ = key.withUnsafeBytes { store.remove(key: $0, now: now) }
        appendMessage(error.message, status: .serverError, opcode: .put, id: id, to: &output)
    }

    private func delete(_ key: UnsafeRawBufferPointer, id: UInt32, output: inout CachetByteBuffer, now: UInt32) {
        RequestCounters.bump(counters.deletes)
        leases.invalidate(key)
        disk?.worker.beginWrite(key: key)
        var removed = store.remove(key: key, now: now)
        if let disk {
            // Before the delete is queued: counts the writes and deletes of the key still queued.
            removed = disk.worker.mayHold(key: key, now: now) || removed
            if case .refused(let error) = disk.worker.submitRemove(key: Array(key)) {
                appendMessage(error.message, status: .serverError, opcode: .delete, id: id, to: &output)
                return
            }
        }
        if removed { watches.publish(.delete, key: key, view: watchView) }
        appendReply(opcode: .delete, status: removed ? .ok : .notFound, id: id, to: &output)
    }

    /// A CLEAR of every key, or of the keys under `prefixes` when there are any.
    private func clear(prefixes: [[UInt8]], id: UInt32, output: inout CachetByteBuffer) -> PendingOperation? {
        leases.invalidateAll()
        if prefixes.isEmpty {
            watches.publishClear(prefix: [])
        } else {
            for prefix in prefixes { watches.publishClear(prefix: prefix) }
        }
        guard let disk else {
            let removed = prefixes.isEmpty ? store.removeAll() : store.removeAll(prefixes: prefixes)
            appendClearReply(id: id, items: removed.items, bytes: removed.bytes, to: &output)
            return nil
        }
        // Entries are written through to disk, so the disk's count covers memory's, including entries
        // whose write is still queued (queued before this CLEAR, it lands before the CLEAR runs); an entry
        // the disk will not hold (its write failed or was refused) is counted from memory.
        var memoryOnlyItems = 0
        var memoryOnlyBytes = 0
        let now = CachetClock.now()
        disk.worker.beginClear()
        let visit: (UnsafeRawBufferPointer, Int) -> Void = { key, valueLength in
            if !disk.worker.mayHold(key: key, now: now) {
                memoryOnlyItems += 1
                memoryOnlyBytes += key.count + valueLength
            }
        }
        if prefixes.isEmpty {
            _ = store.removeAll(visit: visit)
        } else {
            _ = store.removeAll(prefixes: prefixes, visit: visit)
        }
        return .clear(id: id, prefixes: prefixes, memoryOnlyItems: memoryOnlyItems, memoryOnlyBytes: memoryOnlyBytes)
    }

    /// Values at least this large are sent from the store's memory when nothing else is waiting to be sent,
    /// rather than copied into the output buffer first.
    static let directSendThreshold = 8 * 1024
    /// GET replies of values at least this large are checked against the connections' memory budget.
    static let budgetCheckThreshold = 1024
    /// Frames of PUTs at least this large have their value received straight into the entry.
    static let directPutThreshold = 64 * 1024

    /// Sends a GET reply's header and value straight to the socket (under the shard's lock, with a
    /// non-blocking `writev`), then queues whatever the socket did not take. Only used while the output
    /// buffer is empty, so replies stay in order.
    private func appendReplyDirectly(
        id: UInt32,
        value: UnsafeRawBufferPointer,
        output: inout CachetByteBuffer,
        directSend: DirectSend
    ) {
        withUnsafeTemporaryAllocation(byteCount: CachetProtocol.frameOverhead, alignment: 4) { header in
            CachetFrameEncoder.writePrefixAndHeader(
                to: header.baseAddress!,
                bodyLength: value.count,
                header: CachetFrameHeader(opcode: .get, word: CachetStatus.ok.rawValue, id: id)
            )
            let headerBytes = UnsafeRawBufferPointer(header)
            let sent = max(0, directSend(headerBytes, value))
            if sent < headerBytes.count {
                output.append(UnsafeRawBufferPointer(rebasing: headerBytes[sent...]))
                output.append(value)
            } else {
                output.append(UnsafeRawBufferPointer(rebasing: value[(sent - headerBytes.count)...]))
            }
        }
    }

    /// The absolute expiry for a TTL: 0 stays 0 (never), otherwise now + ttl, saturating.
    static func expiry(ttl: UInt32, now: UInt32) -> UInt32 {
        guard ttl > 0 else { return 0 }
        let (sum, overflow) = now.addingReportingOverflow(ttl)
        return overflow ? UInt32.max : sum
    }
}
