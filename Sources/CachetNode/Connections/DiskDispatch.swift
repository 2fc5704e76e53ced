import CachetIO
import CachetStore
import CachetWire
import Dispatch

/// Disk dispatch: a GET that missed memory, a PUT bound for the disk tier, or a CLEAR goes to the disk
/// worker; its completion hops back to the loop's queue, where the host writes the reply
/// (``DiskCompletions``) and carries on with the connection's requests.
///
/// One per loop of a node with a disk tier, a collaborator of its ``NodeIOQueue``; used only on the loop's
/// queue (`@unchecked Sendable` for the completions that hop back there).
final class DiskDispatch: @unchecked Sendable {
    /// The loop whose connections wait.
    unowned let host: NodeIOQueue
    /// The disk tier.
    let disk: DiskTier
    /// The budget a PUT waiting for room in the disk queue is charged to.
    let memory: ConnectionMemory

    /// Reads of whole values longer than the fair allowance in flight on this loop, and those waiting for
    /// one to end (``startGet(_:for:)``).
    private var largeReads = 0
    private var deferredGets: [(PendingOperation, Connection)] = []

    init(host: NodeIOQueue, disk: DiskTier, memory: ConnectionMemory) {
        self.host = host
        self.disk = disk
        self.memory = memory
    }

    /// Starts a disk operation a connection waits for. A PUT waiting for room in the disk queue holds its
    /// copy of the value: counted in the connections' budget until the queue takes it (``start(_:for:)``
    /// gives it back).
    func begin(_ operation: PendingOperation, for connection: Connection) {
        if case .put(let key, let value, _, _) = operation { memory.charge(key.count + value.count, for: .requests) }
        if case .itemPut(let write) = operation { memory.charge(write.key.count + write.value.count, for: .requests) }
        if case .uploadPart(let request) = operation {
            return uploadPart(request, for: connection)
        }
        start(operation, for: connection)
    }

    /// Answers on the loop's queue, after the current turn (a part refused at once still waits for it, so
    /// that the connection is not processed again from inside its own processing).
    private func reply(
        to connection: Connection,
        _ write: @escaping @Sendable (RequestProcessor, inout CachetByteBuffer, UInt32) -> Void
    ) {
        host.execute { [self] in host.resume(connection) { write($0, &$1, $2) } }
    }

    /// Reads a whole value from the disk tier for a GET. One longer than the fair allowance is charged to
    /// the connections' budget while it is read and answered; when the budget has no room for it and
    /// another such read is in flight on this loop, it waits for that one to end. So values read whole
    /// from disk hold at most the budget, and one value per loop beyond it, however many connections ask
    /// (values longer than `--large-value` live on disk only, and are read whole by every GET of them).
    private func startGet(_ operation: PendingOperation, for connection: Connection) {
        let key = operation.diskReadKey.unsafelyUnwrapped
        // A value longer than a reply frame holds is not read: it is answered TOO_LARGE.
        let longest = host.processor.maximumPayloadLength - CachetProtocol.headerSize
        let length = disk.store.indexedValueLength(key: key) ?? 0
        // Nothing is charged for a value too long to be read (answered TOO_LARGE) or a short one.
        let charged = length > longest || length <= ConnectionMemory.fairAllowance ? 0 : length
        if charged > 0 {
            guard largeReads == 0 || charged <= memory.replyRoom else {
                deferredGets.append((operation, connection))
                disk.readsDeferred.add(1)
                return
            }
            largeReads += 1
            memory.charge(charged, for: .replies)
        }
        disk.worker.get(key: key, now: CachetClock.now(), maximumValueLength: longest) { [self] entry in
            host.execute { [self] in
                if let entry, entry.oversizedLength > 0,
                    case .get(_, let id, false, let lease, let withTTL, true, false) = operation
                {
                    // Longer than a frame, and the client takes several.
                    startFrames(key: key, id: id, lease: lease, withTTL: withTTL, for: connection)
                } else {
                    host.resume(connection) { processor, output, now in
                        processor.diskCompletions.completeGet(operation, entry: entry, output: &output, now: now)
                    }
                }
                if charged > 0 {
                    // The reply is in the connection's output now, charged there when it settles.
                    memory.charge(-charged, for: .replies)
                    largeReads -= 1
                    startDeferredGets()
                }
            }
        }
    }

    /// Drops the GETs a connection that closed was waiting for.
    func forget(_ connection: Connection) {
        guard !deferredGets.isEmpty else { return }
        deferredGets.removeAll { $0.1 === connection }
    }

    /// Starts the GETs that waited for a large read to end, while they may (those whose connection closed
    /// meanwhile are dropped).
    private func startDeferredGets() {
        while !deferredGets.isEmpty {
            let (operation, connection) = deferredGets.removeFirst()
            guard case .waitingForCompletion = connection.phase else { continue }
            let before = deferredGets.count
            startGet(operation, for: connection)
            // Deferred again: wait for the next read to end.
            if deferredGets.count > before { return }
        }
    }

    // MARK: Values answered in several frames

    /// Answers a GET with the `frames` flag of a value longer than one frame holds (``ValueFrames``): the
    /// value is opened in the disk queue's order (a write queued before the GET is seen; one queued after it
    /// is not, whatever the pieces still to send), then sent a piece at a time.
    private func startFrames(key: [UInt8], id: UInt32, lease: Bool, withTTL: Bool, for connection: Connection) {
        disk.worker.openValue(key: key, now: CachetClock.now()) { [self] opening in
            host.execute { [self] in
                guard case .waitingForCompletion = connection.phase else { return }
                let source: ValueFrames.Source
                let expiry: UInt32
                switch opening {
                case .miss:
                    // Gone since it was looked up (deleted, replaced by a short value read again, expired).
                    return host.resume(connection) { processor, output, now in
                        processor.diskCompletions.completeGet(
                            key: key,
                            id: id,
                            entry: nil,
                            lease: lease,
                            withTTL: withTTL,
                            output: &output,
                            now: now
                        )
                    }
                case .pieces(let pieces):
                    source = .pieces(pieces)
                    expiry = pieces.expiry
                case .whole(let entry):
                    source = .bytes(entry.value)
                    expiry = entry.expiry
                }
                let counters = host.processor.commands.counters
                RequestCounters.bump(counters.hits)
                RequestCounters.bump(counters.diskHits)
                let now = CachetClock.now()
                let ttl: UInt32? = withTTL ? (expiry == 0 ? 0 : max(expiry, now) &- now) : nil
                connection.valueFrames = ValueFrames(source: source, id: id, ttl: ttl)
                sendNextPiece(on: connection)
            }
        }
    }

    /// Reads and sends the next piece of the value a connection's GET is answered with in several frames:
    /// a frame of status CONTINUES, or OK for the last piece, after which the connection carries on with
    /// its requests. A piece read from disk is charged to the connections' budget while it is read; a
    /// damaged block ends the reply with SERVER_ERROR, which voids the frames before it.
    func sendNextPiece(on connection: Connection) {
        guard let frames = connection.valueFrames else { return }
        let prefix = frames.next == 0 && frames.ttl != nil ? 4 : 0
        let room = host.processor.maximumPayloadLength - CachetProtocol.headerSize - prefix
        let count = min(
            frames.total - frames.next,
            ValueFrames.pieceLength,
            room,
            max(ConnectionMemory.fairAllowance, memory.replyRoom)
        )
        switch frames.source {
        case .bytes(let value):
            // Sent from a later block, never from inside a settle or a resume.
            let piece = Array(value[frames.next..<(frames.next + count)])
            host.execute { [self] in deliver(piece, of: frames, on: connection) }
        case .pieces(let pieces):
            memory.charge(count, for: .replies)
            disk.worker.readPiece(of: pieces, start: frames.next, count: count) { [self] piece in
                host.execute { [self] in
                    memory.charge(-count, for: .replies)
                    deliver(piece, of: frames, on: connection)
                }
            }
        }
    }

    /// Sends a piece read for `frames` (nil: it could not be read), unless the connection closed or went on
    /// meanwhile.
    private func deliver(_ piece: [UInt8]?, of frames: ValueFrames, on connection: Connection) {
        guard connection.valueFrames === frames, case .waitingForCompletion = connection.phase else { return }
        let id = frames.id
        guard let piece else {
            connection.valueFrames = nil
            return host.resume(connection) { _, output, _ in
                appendMessage(
                    "the value could not be read from the disk tier while it was sent (a damaged block, or a failed "
                        + "read): the frames before this one are void",
                    status: .serverError,
                    opcode: .get,
                    id: id,
                    to: &output
                )
            }
        }
        let ttl = frames.next == 0 ? frames.ttl : nil
        frames.next += piece.count
        guard frames.next < frames.total else {
            connection.valueFrames = nil
            return host.resume(connection) { _, output, _ in
                piece.withUnsafeBytes { appendValuePiece($0, status: .ok, ttl: ttl, id: id, output: &output) }
            }
        }
        frames.awaitingDrain = true
        host.appendWhileWaiting(connection) { output in
            piece.withUnsafeBytes { appendValuePiece($0, status: .continues, ttl: ttl, id: id, output: &output) }
        }
    }

    // MARK: Values sent in parts

    /// Takes a part of a value sent in parts (`Protocol/PROTOCOL.md`, "PUT in parts"): checked against its
    /// upload, written to the upload's staging file on the disk queue (its bytes charged to the budget
    /// meanwhile), answered once written, and for the last part once the value is stored.
    private func uploadPart(_ request: UploadPartRequest, for connection: Connection) {
        let held = request.bytes.count
        let worker = disk.worker
        let admission = disk.uploads.admit(
            key: request.key.withUnsafeBytes { $0 },
            part: request.part,
            expiry: request.expiry,
            connection: ObjectIdentifier(connection),
            now: CachetClock.now()
        ) { total in worker.beginUpload(key: request.key, total: total, expiry: request.expiry) }
        let id = request.id
        switch admission {
        case .refused(let status, let message, let abandoned):
            if let abandoned { worker.abortUpload(abandoned) }
            reply(to: connection) { processor, output, _ in
                if status == .badRequest { RequestCounters.bump(processor.commands.counters.badRequests) }
                appendMessage(message, status: status, opcode: .put, id: id, to: &output)
            }
        case .accepted(let upload, let last, let replaced):
            if let replaced { worker.abortUpload(replaced) }
            connection.sentParts = true
            memory.charge(held, for: .requests)
            worker.writeUpload(upload, bytes: request.bytes) { [self] failure in
                host.execute { [self] in
                    memory.charge(-held, for: .requests)
                    if let failure {
                        worker.abortUpload(upload)
                        if !disk.uploads.abandon(upload) { disk.uploads.countGivenUp() }
                        host.resume(connection) { _, output, _ in
                            appendMessage(
                                "the upload could not be staged on disk and is given up: \(failure)",
                                status: .serverError,
                                opcode: .put,
                                id: id,
                                to: &output
                            )
                        }
                    } else if last {
                        commit(upload, request: request, for: connection)
                    } else {
                        host.resume(connection) { _, output, _ in
                            appendReply(opcode: .put, status: .ok, id: id, to: &output)
                        }
                    }
                }
            }
        }
    }

    /// Stores an upload whose last part is written: the key's older value leaves memory (a read then goes
    /// to the disk queue, behind the commit), and the staging file becomes its entry file. Answered once
    /// it has; given up when the connection closed meanwhile (never acknowledged).
    private func commit(_ upload: CachetDiskUpload, request: UploadPartRequest, for connection: Connection) {
        guard case .waitingForCompletion = connection.phase else {
            disk.worker.abortUpload(upload)
            disk.uploads.countGivenUp()
            return
        }
        request.key.withUnsafeBytes { host.processor.commands.prepareLargeWrite($0) }
        submitCommit(upload, request: request, for: connection)
    }

    private func submitCommit(_ upload: CachetDiskUpload, request: UploadPartRequest, for connection: Connection) {
        let id = request.id
        let key = request.key
        let ttl = request.ttl
        let uploads = disk.uploads
        let admission = disk.worker.submitUploadCommit(upload) { [self] failure in
            reply(to: connection) { processor, output, _ in
                if let failure {
                    uploads.countGivenUp()
                    appendMessage(failure.message, status: .serverError, opcode: .put, id: id, to: &output)
                } else {
                    uploads.completed()
                    key.withUnsafeBytes { processor.commands.publishLargeWrite($0, ttl: ttl) }
                    appendReply(opcode: .put, status: .ok, id: id, to: &output)
                }
            }
        }
        switch admission {
        case .queued:
            // A write of the key another loop put in memory and queued before this one must not shadow it.
            key.withUnsafeBytes { host.processor.commands.dropMemoryCopy($0) }
        case .full:
            disk.worker.notifyWhenWritable { [self] in
                host.execute { [self] in
                    guard case .waitingForCompletion = connection.phase else {
                        disk.worker.abandonWrite(key: key)
                        disk.worker.abortUpload(upload)
                        uploads.countGivenUp()
                        return
                    }
                    submitCommit(upload, request: request, for: connection)
                }
            }
        case .refused(let error):
            disk.worker.abortUpload(upload)
            uploads.countGivenUp()
            reply(to: connection) { _, output, _ in
                appendMessage(error.message, status: .serverError, opcode: .put, id: id, to: &output)
            }
        }
    }

    /// Hands a disk operation to the disk queue; its completion hops back to the loop's queue.
    private func start(_ operation: PendingOperation, for connection: Connection) {
        switch operation {
        case .rangedGet(let key, let id, let range):
            // Only the range's blocks are read: at most what one reply frame holds, and what the connections'
            // budget has room for now (at least the fair allowance), charged to it while the read is in flight;
            // the client asks again for the rest.
            let limit = min(
                host.processor.rangeLimit,
                max(ConnectionMemory.fairAllowance, memory.replyRoom),
                Int(clamping: range.length)
            )
            memory.charge(limit, for: .replies)
            disk.worker.getRange(
                key: key,
                offset: range.offset,
                length: range.length,
                limit: limit,
                now: CachetClock.now()
            ) {
                [self] read in
                host.execute { [self] in
                    memory.charge(-limit, for: .replies)
                    // Straight to the socket, as a binary reply or an HTTP response's bytes (not a memcached
                    // session's, nor behind forwarded replies).
                    let direct =
                        connection.memcache != nil || connection.forwards != nil ? nil : DirectSend(channel: connection)
                    let http = connection.http
                    host.resume(connection) { processor, output, _ in
                        processor.diskCompletions.completeRange(
                            read,
                            id: id,
                            output: &output,
                            directSend: direct,
                            http: http
                        )
                    }
                }
            }
        case .get:
            startGet(operation, for: connection)
        case .put(let key, let value, let expiry, let id):
            // Charged to the budget when the PUT began to wait (``begin(_:for:)``), given back once it stops.
            let held = key.count + value.count
            disk.worker.notifyWhenWritable { [self] in
                host.execute { [self] in
                    // A connection closed meanwhile (or closing at shutdown) has given up on this PUT: it was
                    // never acknowledged.
                    guard case .waitingForCompletion = connection.phase else {
                        memory.charge(-held, for: .requests)
                        disk.worker.abandonWrite(key: key)
                        return
                    }
                    switch disk.worker.submitPut(key: key, value: value, expiry: expiry) {
                    case .queued:
                        memory.charge(-held, for: .requests)
                        host.processor.commands.keepMemoryCopy(key, onlyIf: value)
                        host.resume(connection) { processor, output, _ in
                            processor.diskCompletions.completePut(id: id, output: &output)
                        }
                    case .full:
                        start(operation, for: connection)
                    case .refused(let error):
                        memory.charge(-held, for: .requests)
                        host.resume(connection) { processor, output, now in
                            processor.diskCompletions.refusePut(
                                key: key,
                                id: id,
                                error: error,
                                output: &output,
                                now: now
                            )
                        }
                    }
                }
            }
        case .clear(let id, let prefixes, let memoryOnlyItems, let memoryOnlyBytes):
            let completion: @Sendable (CachetDiskClearResult) -> Void = { [self] removed in
                host.execute { [self] in
                    host.resume(connection) { processor, output, _ in
                        processor.diskCompletions.completeClear(
                            id: id,
                            memoryOnlyItems: memoryOnlyItems,
                            memoryOnlyBytes: memoryOnlyBytes,
                            disk: removed,
                            output: &output
                        )
                    }
                }
            }
            if prefixes.isEmpty {
                disk.worker.removeAll(completion: completion)
            } else {
                disk.worker.removeAll(prefixes: prefixes, completion: completion)
            }
        case .itemWrite(let request):
            readThenWriteItem(request, for: connection)
        case .itemPut(let write):
            waitToQueue(write, for: connection)
        case .forward, .fanOut, .watch, .uploadPart:
            break
        }
    }

    // MARK: Items

    /// An item write that reads the item, which memory missed: the disk tier's entry is read (not one longer
    /// than items may be), then the write is done with it as the item, unless a write of the key came since.
    private func readThenWriteItem(_ request: ItemWriteRequest, for connection: Connection) {
        let limit = disk.largeValueThreshold
        disk.worker.get(key: request.key, now: CachetClock.now(), maximumValueLength: limit) { [self] entry in
            host.execute { [self] in
                guard case .waitingForCompletion = connection.phase else { return }
                let commands = host.processor.commands
                let now = CachetClock.now()
                var current = entry.flatMap { entry in
                    request.key.withUnsafeBytes { disk.worker.mayKeepPromotion(key: $0, of: entry) } ? entry : nil
                }
                if let live = current, CachetClock.isExpired(live.expiry, now: now) { current = nil }
                if let oversized = current, oversized.oversizedLength > 0 {
                    // Longer than items may be: there, but neither read nor changed.
                    let reply: ItemReply =
                        request.mode == .add
                        ? .refused(.notStored, "add: the key holds a value")
                        : .refused(.tooLarge, NodeCommands.itemTooLong(oversized.oversizedLength, limit: limit))
                    return host.resume(connection) { _, output, _ in
                        appendItemReply(reply, id: request.id, output: &output)
                    }
                }
                let outcome = request.key.withUnsafeBytes { key in
                    request.data.withUnsafeBytes { data in
                        commands.writeItem(
                            key,
                            mode: request.mode,
                            flags: request.flags,
                            cas: request.cas,
                            data: data,
                            ttl: request.ttl,
                            now: now,
                            diskChecked: true,
                            diskEntry: current,
                            newCAS: request.newCAS
                        )
                    }
                }
                switch outcome {
                case .answered(let reply):
                    host.resume(connection) { _, output, _ in appendItemReply(reply, id: request.id, output: &output) }
                case .waitingForDisk(let write):
                    let waiting = ItemDiskWrite(
                        key: write.key,
                        value: write.value,
                        expiry: write.expiry,
                        fields: write.fields,
                        reply: write.reply,
                        id: request.id
                    )
                    memory.charge(waiting.key.count + waiting.value.count, for: .requests)
                    waitToQueue(waiting, for: connection)
                case .failed(let error):
                    host.resume(connection) { _, output, _ in
                        appendMessage(error.message, status: .serverError, opcode: .put, id: request.id, to: &output)
                    }
                case .readDiskFirst:
                    // Not with the disk read already.
                    host.resume(connection) { _, output, _ in
                        appendMessage(
                            "item write not done",
                            status: .serverError,
                            opcode: .put,
                            id: request.id,
                            to: &output
                        )
                    }
                }
            }
        }
    }

    /// An item stored in memory whose disk write waits for room in the disk queue, as a PUT's does
    /// (``start(_:for:)``): answered once queued; charged to the budget meanwhile.
    private func waitToQueue(_ write: ItemDiskWrite, for connection: Connection) {
        let held = write.key.count + write.value.count
        disk.worker.notifyWhenWritable { [self] in
            host.execute { [self] in
                guard case .waitingForCompletion = connection.phase else {
                    memory.charge(-held, for: .requests)
                    disk.worker.abandonWrite(key: write.key)
                    return
                }
                switch disk.worker.submitPut(
                    key: write.key,
                    value: write.value,
                    expiry: write.expiry,
                    fields: write.fields
                )
                {
                case .queued:
                    memory.charge(-held, for: .requests)
                    host.resume(connection) { _, output, _ in
                        appendItemReply(write.reply, id: write.id, output: &output)
                    }
                case .full:
                    // Still charged: wait again.
                    waitToQueue(write, for: connection)
                case .refused(let error):
                    memory.charge(-held, for: .requests)
                    host.resume(connection) { processor, output, now in
                        processor.commands.forgetRefusedPut(key: write.key, now: now)
                        appendMessage(error.message, status: .serverError, opcode: .put, id: write.id, to: &output)
                    }
                }
            }
        }
    }
}
