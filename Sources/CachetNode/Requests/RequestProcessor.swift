import CachetCluster
import CachetIO
import CachetStore
import CachetWire

#if canImport(Glibc)
import Glibc
#endif

/// The binary protocol's front end (`Protocol/PROTOCOL.md`): decodes request frames, has a node with users
/// check them (``RequestAuthorizer``), a node of a cluster route them (``RequestRouter``), runs them as
/// ``NodeCommands`` and encodes the replies. No I/O.
///
/// One processor serves one event loop; it is called only on that loop's queue.
struct RequestProcessor {
    /// What requests come down to.
    let commands: NodeCommands
    let maximumPayloadLength: Int
    /// The STATS body; `true` for the whole of it, `false` without the cluster's member list (a user
    /// that is not an admin, on a node with users).
    let statistics: @Sendable (Bool) -> String
    /// The budget shared by every connection's buffers and large PUTs still arriving.
    let connectionMemory: ConnectionMemory
    /// The routing decision of a node of a cluster; nil on a node that is a cluster of one, which serves
    /// every key. One reference, so that a node without a cluster file carries a single nil field: three
    /// cost measurably more in copies (BENCHMARKS.md, "Figures behind choices in the code").
    let cluster: RequestRouter?
    /// Whether ``cluster`` is set: the one test a request pays on a node that never forwards (testing the
    /// optional reference itself cost more: BENCHMARKS.md, "Figures behind choices in the code").
    let forwards: Bool
    /// The check of each request against its connection's user (`--auth-file`); nil: every client may
    /// send every request.
    let authorizer: RequestAuthorizer?

    /// The replies to requests that went to the disk tier.
    var diskCompletions: DiskCompletions { DiskCompletions(commands: commands) }
    /// GETs and PUTs with the `item` flag.
    var items: ItemRequests { ItemRequests(commands: commands) }
    /// What a node of a cluster gives its peers and takes from them; nil on a cluster of one.
    var peerValues: PeerValues? { cluster?.peerValues }

    init(
        store: CachetMemoryStore,
        disk: DiskTier?,
        counters: RequestCounters,
        maximumPayloadLength: Int,
        largeValueThreshold: Int = 8 << 20,
        statistics: @escaping @Sendable (Bool) -> String,
        connectionMemory: ConnectionMemory,
        cluster: ClusterRouting? = nil,
        auth: NodeAuth? = nil,
        leases: NodeLeases = NodeLeases(lifetime: 10),
        watches: NodeWatchHub = NodeWatchHub(ringLimit: 1 << 20, retain: 60, sendLimit: 1 << 20),
        watchView: WatchIndexView = WatchIndexView(),
        casSource: CachetCASSource = CachetCASSource()
    ) {
        let commands = NodeCommands(
            store: store,
            disk: disk,
            largeValueThreshold: disk?.largeValueThreshold ?? largeValueThreshold,
            counters: counters,
            leases: leases,
            watches: watches,
            watchView: watchView,
            casSource: casSource
        )
        self.commands = commands
        self.authorizer = auth.map { RequestAuthorizer(auth: $0) }
        self.maximumPayloadLength = maximumPayloadLength
        self.statistics = statistics
        self.connectionMemory = connectionMemory
        self.cluster = cluster.map { RequestRouter($0, commands: commands) }
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
                RequestCounters.bump(commands.counters.badRequests)
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
                guard authorizer.unsafelyUnwrapped.authorize(frame, in: region, access: &access, output: &output) else {
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
        do throws(CachetWireError) {
            try CachetFrameDecoder.validateRequestHeader(header)
            switch header.opcode {
            case .get:
                if header.flags & CachetRequestFlags.range.rawValue != 0 {
                    return try getRange(
                        frame,
                        in: buffer,
                        output: &output,
                        outputCapacityLimit: outputCapacityLimit,
                        noRoom: &noRoom,
                        now: now
                    )
                }
                let key = try CachetBodyDecoder.decodeKey(in: buffer, body: frame.body)
                var warmable = false
                if forwards {
                    let warmUp = CachetRequestFlags.forwarded.rawValue | CachetRequestFlags.warmUp.rawValue
                    if header.flags & warmUp == warmUp {
                        return cluster.unsafelyUnwrapped.peerValues.serveWarmUp(
                            UnsafeRawBufferPointer(rebasing: buffer[key]),
                            id: header.id,
                            output: &output,
                            now: now
                        )
                    }
                    switch cluster.unsafelyUnwrapped.route(frame, key: key, in: buffer, output: &output) {
                    case .here: break
                    case .answered: return nil
                    case .pending(let operation): return operation
                    }
                    warmable = header.flags & CachetRequestFlags.lastHop.rawValue == 0
                }
                if header.flags & CachetRequestFlags.item.rawValue != 0 {
                    return try items.get(
                        UnsafeRawBufferPointer(rebasing: buffer[key]),
                        flags: header.flags,
                        id: header.id,
                        output: &output,
                        outputCapacityLimit: outputCapacityLimit,
                        noRoom: &noRoom,
                        now: now,
                        directSend: directSend
                    )
                }
                if header.flags & CachetRequestFlags.ttl.rawValue != 0 {
                    return getWithTTL(
                        UnsafeRawBufferPointer(rebasing: buffer[key]),
                        id: header.id,
                        output: &output,
                        outputCapacityLimit: outputCapacityLimit,
                        noRoom: &noRoom,
                        now: now,
                        lease: header.flags & CachetRequestFlags.lease.rawValue != 0,
                        inFrames: Self.takesFrames(header)
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
                    lease: header.flags & CachetRequestFlags.lease.rawValue != 0,
                    inFrames: Self.takesFrames(header)
                )
            case .put:
                let leased = header.flags & CachetRequestFlags.lease.rawValue != 0
                let (put, token) = try CachetBodyDecoder.decodePut(in: buffer, body: frame.body, leased: leased)
                if forwards {
                    // (A meta get that only reads is no write of its key.)
                    if !RequestRouter.isItemRead(frame, key: put.key, in: buffer) {
                        cluster.unsafelyUnwrapped.warmUp?.noteWrite(UnsafeRawBufferPointer(rebasing: buffer[put.key]))
                    }
                    switch cluster.unsafelyUnwrapped.route(frame, key: put.key, in: buffer, output: &output) {
                    case .here: break
                    case .answered: return nil
                    case .pending(let operation): return operation
                    }
                }
                if header.flags & CachetRequestFlags.item.rawValue != 0 {
                    return try items.put(put, flags: header.flags, in: buffer, id: header.id, output: &output, now: now)
                }
                if header.flags & CachetRequestFlags.part.rawValue != 0 {
                    return try uploadPart(put, leased: leased, in: buffer, id: header.id, now: now)
                }
                guard leased else { return self.put(put, in: buffer, id: header.id, output: &output, now: now) }
                return leasedPut(put, token: token, in: buffer, id: header.id, output: &output, now: now)
            case .delete:
                let key = try CachetBodyDecoder.decodeKey(in: buffer, body: frame.body)
                if forwards {
                    cluster.unsafelyUnwrapped.warmUp?.noteWrite(UnsafeRawBufferPointer(rebasing: buffer[key]))
                    switch cluster.unsafelyUnwrapped.route(frame, key: key, in: buffer, output: &output) {
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
                    if let fanOut = ForwardRequest.fanOut(
                        frame,
                        in: buffer,
                        clearPrefixes: prefixes == requested ? nil : prefixes
                    ) {
                        return fanOut
                    }
                    cluster.unsafelyUnwrapped.noteInvalidation(header)
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
                if forwards, let fanOut = ForwardRequest.fanOut(frame, in: buffer) { return fanOut }
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
                if forwards, try cluster.unsafelyUnwrapped.answerPeerPing(frame, in: buffer, output: &output) {
                    return nil
                }
                try CachetBodyDecoder.decodeEmpty(body: frame.body)
                appendReply(opcode: .ping, status: .ok, id: header.id, to: &output)
            }
        } catch {
            RequestCounters.bump(commands.counters.badRequests)
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
        lease: Bool = false,
        inFrames: Bool = false
    ) -> PendingOperation? {
        let lookup = commands.lookUp(key, now: now) { value, _ in
            // Room for the whole reply in the buffer as it is, or by growing it within the budget: a
            // direct send may leave all of it to be queued. (Values below the threshold are never held
            // back: their replies fit a connection's initial buffer, or grow it by little.)
            guard Self.replyFits(value.count, limit: outputCapacityLimit, output: output) else { return false }
            if let directSend, value.count >= Self.directSendThreshold, output.readableBytes == 0,
                directSend.memcache == nil
            {
                directSend.sendReply(id: id, value: value, output: &output)
            } else {
                appendReply(opcode: .get, status: .ok, id: id, body: value, to: &output)
            }
            return true
        }
        switch lookup {
        case .hit: return nil
        case .noRoom:
            noRoom = true
            return nil
        case .miss: break
        }
        // A key this node owns since a membership change and never wrote since is asked of its previous
        // owner first (its disk tier cannot hold a newer value).
        // (Not for a GET with the lease flag: its miss is granted a lease here, and the one caller that holds
        // it loads the value, so a membership change costs a key at most one load.)
        if warmable && !lease, let operation = cluster.unsafelyUnwrapped.peerValues.warmUpRequest(key, id: id) {
            return operation
        }
        return missedMemory(key, id: id, lease: lease, withTTL: false, inFrames: inFrames, output: &output, now: now)
    }

    /// Whether a GET may be answered in several frames: the `frames` flag from a client (a request between
    /// nodes is always answered in one).
    @inline(__always)
    private static func takesFrames(_ header: CachetFrameHeader) -> Bool {
        header.flags & (CachetRequestFlags.frames.rawValue | CachetRequestFlags.forwarded.rawValue)
            == CachetRequestFlags.frames.rawValue
    }

    /// A GET that missed memory: to the disk queue only when the key may be there; else a miss, with a
    /// lease reply for a GET with the `lease` flag.
    private func missedMemory(
        _ key: UnsafeRawBufferPointer,
        id: UInt32,
        lease: Bool,
        withTTL: Bool,
        inFrames: Bool,
        output: inout CachetByteBuffer,
        now: UInt32
    ) -> PendingOperation? {
        if commands.afterMemoryMiss(key, now: now) {
            return .get(key: Array(key), id: id, warmUp: false, lease: lease, withTTL: withTTL, inFrames: inFrames)
        }
        if lease {
            appendLeaseMiss(commands.acquireLease(key), id: id, to: &output)
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
        lease: Bool,
        inFrames: Bool
    ) -> PendingOperation? {
        let lookup = commands.lookUp(key, now: now) { value, expiry in
            guard Self.replyFits(value.count, extra: 4, limit: outputCapacityLimit, output: output) else {
                return false
            }
            appendValueWithTTL(value, expiry: expiry, id: id, output: &output, now: now)
            return true
        }
        return Self.afterLookup(lookup, noRoom: &noRoom) {
            missedMemory(key, id: id, lease: lease, withTTL: true, inFrames: inFrames, output: &output, now: now)
        }
    }

    /// What a flagged GET's memory lookup comes to: answered on a hit; not answered now (nor counted) when
    /// the reply has no room, and read again once there is; else what `miss` says.
    private static func afterLookup(
        _ lookup: NodeCommands.Lookup,
        noRoom: inout Bool,
        miss: () -> PendingOperation?
    ) -> PendingOperation? {
        switch lookup {
        case .hit: return nil
        case .noRoom:
            noRoom = true
            return nil
        case .miss: return miss()
        }
    }

    /// A GET with the `range` flag (`Protocol/PROTOCOL.md`, "GET of a range"): its body decoded, routed as any
    /// GET, then answered with the value's length and the bytes of the range, from memory or else the disk
    /// tier; kept apart from the plain GET's path, which pays one flag test for it. Not warmed up from a
    /// previous owner; not with the `lease` or `ttl` flag (BAD_REQUEST).
    private func getRange(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        output: inout CachetByteBuffer,
        outputCapacityLimit: Int,
        noRoom: inout Bool,
        now: UInt32
    ) throws(CachetWireError) -> PendingOperation? {
        let header = frame.header
        let (keyRange, range) = try CachetBodyDecoder.decodeRangedKey(in: buffer, body: frame.body)
        let excluded =
            CachetRequestFlags.lease.rawValue | CachetRequestFlags.ttl.rawValue | CachetRequestFlags.item.rawValue
        guard header.flags & excluded == 0 else {
            throw CachetWireError(
                code: .malformedBody,
                message: "a GET of a range takes neither the lease, the ttl nor the item flag"
            )
        }
        if forwards {
            switch cluster.unsafelyUnwrapped.route(frame, key: keyRange, in: buffer, output: &output) {
            case .here: break
            case .answered: return nil
            case .pending(let operation): return operation
            }
        }
        let key = UnsafeRawBufferPointer(rebasing: buffer[keyRange])
        let id = header.id
        let lookup = commands.lookUp(key, now: now) { value, _ in
            let count = range.bounds(total: value.count)?.count ?? 0
            guard Self.replyFits(count, extra: 16, limit: outputCapacityLimit, output: output) else { return false }
            appendRange(range, of: value, id: id, limit: rangeLimit, output: &output)
            return true
        }
        return Self.afterLookup(lookup, noRoom: &noRoom) {
            if commands.afterMemoryMiss(key, now: now) { return .rangedGet(key: Array(key), id: id, range: range) }
            appendReply(opcode: .get, status: .notFound, id: id, to: &output)
            return nil
        }
    }

    /// A PUT with the `part` flag (`Protocol/PROTOCOL.md`, "PUT in parts"): its part decoded and copied out
    /// for the disk queue, where the node's uploads take it (``DiskDispatch``). A node without a disk tier
    /// takes no parts (TOO_LARGE), nor does a PUT with a lease token (BAD_REQUEST).
    private func uploadPart(
        _ put: CachetPutBody,
        leased: Bool,
        in buffer: UnsafeRawBufferPointer,
        id: UInt32,
        now: UInt32
    ) throws(CachetWireError) -> PendingOperation {
        guard !leased else { throw CachetUploadPart.leasedPartError }
        let part = try CachetUploadPart.decode(in: buffer, value: put.value)
        guard commands.disk != nil else {
            throw CachetWireError(
                code: .payloadTooLarge,
                message: "this node has no disk tier (--disk-limit 0), which values sent in parts are stored in: "
                    + "send the value whole in one PUT"
            )
        }
        return .uploadPart(
            UploadPartRequest(
                key: Array(UnsafeRawBufferPointer(rebasing: buffer[put.key])),
                part: part,
                bytes: Array(UnsafeRawBufferPointer(rebasing: buffer[part.bytes])),
                ttl: put.ttl,
                expiry: NodeCommands.expiry(ttl: put.ttl, now: now),
                id: id
            )
        )
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
        let stored = commands.completeLease(key, token: token) {
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
        let outcome = commands.put(
            key: UnsafeRawBufferPointer(rebasing: buffer[put.key]),
            value: UnsafeRawBufferPointer(rebasing: buffer[put.value]),
            ttl: put.ttl,
            now: now,
            invalidatingLease: invalidatingLease
        )
        switch outcome {
        case .stored:
            appendReply(opcode: .put, status: .ok, id: id, to: &output)
            return nil
        case .waitingForDisk(let key, let value, let expiry):
            return .put(key: key, value: value, expiry: expiry, id: id)
        case .tooLarge(let message):
            appendMessage(message, status: .tooLarge, opcode: .put, id: id, to: &output)
            return nil
        case .failed(let error):
            appendMessage(error.message, status: .serverError, opcode: .put, id: id, to: &output)
            return nil
        }
    }

    private func delete(_ key: UnsafeRawBufferPointer, id: UInt32, output: inout CachetByteBuffer, now: UInt32) {
        switch commands.delete(key, now: now) {
        case .deleted: appendReply(opcode: .delete, status: .ok, id: id, to: &output)
        case .notFound: appendReply(opcode: .delete, status: .notFound, id: id, to: &output)
        case .failed(let error):
            appendMessage(error.message, status: .serverError, opcode: .delete, id: id, to: &output)
        }
    }

    /// A CLEAR of every key, or of the keys under `prefixes` when there are any.
    private func clear(prefixes: [[UInt8]], id: UInt32, output: inout CachetByteBuffer) -> PendingOperation? {
        switch commands.clear(prefixes: prefixes) {
        case .cleared(let items, let bytes):
            appendClearReply(id: id, items: items, bytes: bytes, to: &output)
            return nil
        case .waitingForDisk(let memoryOnlyItems, let memoryOnlyBytes):
            return .clear(
                id: id,
                prefixes: prefixes,
                memoryOnlyItems: memoryOnlyItems,
                memoryOnlyBytes: memoryOnlyBytes
            )
        }
    }

    /// Starts receiving a partial PUT frame's value straight into a new entry (``DirectPut``), when the
    /// frame is a valid PUT whose header and key have arrived, the node has no disk tier (which copies every
    /// write), and the entry fits the memory limit; or, for a value longer than `--large-value` there, into
    /// a scratch buffer that throws it away (answered TOO_LARGE once its last byte has arrived). Anything else (including every error) returns nil and
    /// takes the normal path once the whole frame is buffered, so replies and their order do not change.
    func startDirectPut(
        in buffer: UnsafeRawBufferPointer,
        at offset: Int,
        payloadLength: Int,
        now: UInt32
    ) -> DirectPut? {
        guard commands.disk == nil, payloadLength <= maximumPayloadLength else { return nil }
        let start = offset + CachetProtocol.lengthPrefixSize
        let bodyStart = start + CachetProtocol.headerSize
        guard buffer.count >= bodyStart + CachetProtocol.putBodyPrefixSize,
            let header = CachetFrameDecoder.decodeHeader(in: buffer, at: offset),
            header.opcode == .put,
            header.flags
                & (CachetRequestFlags.lease.rawValue | CachetRequestFlags.part.rawValue
                    | CachetRequestFlags.item.rawValue) == 0,
            (try? CachetFrameDecoder.validateRequestHeader(header)) != nil,
            let put = try? CachetBodyDecoder.decodePut(in: buffer, body: bodyStart..<(start + payloadLength)),
            put.key.upperBound <= buffer.count,
            cluster?.router.foreignOwner(of: UnsafeRawBufferPointer(rebasing: buffer[put.key])) == nil
        else { return nil }
        let buffered = UnsafeRawBufferPointer(rebasing: buffer[put.value.lowerBound..<buffer.count])
        if put.value.count > commands.largeValueThreshold {
            // Refused now, its bytes thrown away as they arrive: never gathered whole in the input.
            return DirectPut(
                refusing: put.value.count,
                because: commands.tooLargeWithoutDisk(put.value.count),
                id: header.id,
                received: buffered.count,
                budget: connectionMemory
            )
        }
        guard connectionMemory.allowsRequest(put.value.count),
            let pending = commands.reserveDirectPut(
                UnsafeRawBufferPointer(rebasing: buffer[put.key]),
                valueLength: put.value.count,
                ttl: put.ttl,
                now: now
            )
        else { return nil }
        if buffered.count > 0 {
            pending.value.baseAddress!.copyMemory(from: buffered.baseAddress!, byteCount: buffered.count)
        }
        return DirectPut(
            pending: pending,
            id: header.id,
            ttl: put.ttl,
            received: buffered.count,
            budget: connectionMemory
        )
    }

    /// Stores a PUT received in place and answers it.
    func completeDirectPut(_ put: DirectPut, output: inout CachetByteBuffer, now: UInt32) {
        if let refusal = put.refusal {
            appendMessage(refusal, status: .tooLarge, opcode: .put, id: put.id, to: &output)
            return
        }
        commands.commitDirectPut(put, now: now)
        appendReply(opcode: .put, status: .ok, id: put.id, to: &output)
    }

    /// Whether a GET reply of a `valueLength`-byte value (and `extra` bytes before it in the body) may be
    /// queued: always for a value below ``budgetCheckThreshold``, else only within `limit` (the output's
    /// capacity plus what the memory budget still allows).
    @inline(__always)
    static func replyFits(_ valueLength: Int, extra: Int = 0, limit: Int, output: borrowing CachetByteBuffer) -> Bool {
        valueLength < budgetCheckThreshold
            || valueLength + extra + CachetProtocol.frameOverhead <= limit - output.readableBytes
    }

    /// The most bytes of value a reply to a GET of a range carries: what one frame holds after the value's
    /// length and tag.
    var rangeLimit: Int { maximumPayloadLength - CachetProtocol.headerSize - CachetValueRange.replyPrefixSize }

    /// Values at least this large are sent from the store's memory when nothing else is waiting to be sent,
    /// rather than copied into the output buffer first.
    static let directSendThreshold = 8 * 1024
    /// GET replies of values at least this large are checked against the connections' memory budget.
    static let budgetCheckThreshold = 1024
    /// Frames of PUTs at least this large have their value received straight into the entry.
    static let directPutThreshold = 64 * 1024
}
