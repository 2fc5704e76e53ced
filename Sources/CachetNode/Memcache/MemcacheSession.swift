import CachetIO
import CachetMemcache
import CachetWire

#if canImport(Glibc)
import Glibc
#endif

/// A connection on the memcached port (`--memcached-port`, `docs/memcached.md`): memcached's text protocol
/// turned into the node's own requests and their replies turned back, so that a memcached client reaches the
/// same command layer, tiers, routing and users as a native one, with no second store and no proxy hop.
///
/// Each text command becomes one native request per key, appended to ``native`` (a GET or PUT with the
/// `item` flag, a DEL, a CLEAR, a STATS, an AUTH, or a PING for what the node answers itself: a version, an
/// error line), with what its reply means in memcached's terms queued in ``contexts``. The connection's
/// ``RequestProcessor`` serves ``native`` as it serves a binary client's input, into the connection's output
/// (forwards, disk reads and all), in order; before each send, the replies appended since the last one are
/// turned into memcached's lines (``MemcacheReplies``). So replies keep the order of the commands, whatever
/// waits for the disk or another member.
///
/// Touched only on its connection's loop queue. `@exclusivity(unchecked)`: its properties are touched on
/// every command, and the run-time exclusivity check on a class property costs two runtime calls per
/// access (as for `Connection`); the single-queue rule keeps accesses from overlapping.
final class MemcacheSession: TranslatingSession {
    /// What the reply to one native request means for memcached.
    enum Reply {
        /// One key of `get`, `gets`, `gat` or `gats`: a VALUE line on a hit, nothing on a miss; `END` after
        /// the last key. The key's `keyLength` bytes wait at the front of ``replyKeys``.
        case value(keyLength: Int, withCAS: Bool, last: Bool)
        /// `set`, `add`, `replace`, `append`, `prepend`, `cas`: STORED, NOT_STORED, EXISTS or NOT_FOUND.
        case stored
        /// A storage command whose expiry is already past: the key is deleted, and the answer is STORED.
        case storedExpired
        /// `delete`: DELETED or NOT_FOUND.
        case deleted
        /// `incr`, `decr`: the number, or NOT_FOUND.
        case number
        /// `touch`: TOUCHED or NOT_FOUND.
        case touched
        /// `flush_all`, `verbosity`: OK.
        case ok
        /// `stats`: the node's STATS in memcached's names.
        case stats
        /// The credentials of a node with users, sent as memcached's first `set`: STORED, or an error.
        case authenticated
        /// A line the node answers itself (`VERSION`, an error), sent in its place among the replies.
        case literal([UInt8])
        /// A meta command (``MemcacheMeta``): its reply line and the flags it returns.
        indirect case meta(MemcacheMeta.Reply)
        /// A native reply nobody reads (the touch after an `ma` with `T`).
        case discard
        /// The TTL read after an `ma` with `t`: the `ma`'s line is written with it.
        case metaTTL
    }

    /// A reply waiting for its native reply, and whether the client asked for none (`noreply`).
    struct Pending {
        let reply: Reply
        let quiet: Bool
    }

    /// The keys of the `.value` replies waiting, back to back in their order: each reply's VALUE line takes
    /// its key from the front (a buffer kept between commands, where an array a key would be allocated and
    /// freed for every get).
    @exclusivity(unchecked) var replyKeys = CachetByteBuffer(capacity: 1024)
    /// Native requests made from the text received, not yet served.
    @exclusivity(unchecked) var native = CachetByteBuffer(capacity: 4096)
    /// The replies the native requests in flight will be turned into, in order.
    @exclusivity(unchecked) private(set) var contexts = PendingQueue<Pending>()
    /// Bytes at the front of the connection's output that are text already (sent as they are).
    @exclusivity(unchecked) var textPending = 0
    /// Whether `quit` was read (or a line too long): nothing more is read, and the connection closes once
    /// what came before is answered.
    @exclusivity(unchecked) private(set) var quitting = false
    /// Bytes of a refused data block still to throw away as they arrive.
    @exclusivity(unchecked) private var discarding = 0
    /// Whether the connection has signed in (on a node with users).
    @exclusivity(unchecked) var authenticated = false
    /// Whether a key of the retrieval being answered failed: its error line ends the command, and the
    /// replies to its other keys are dropped.
    @exclusivity(unchecked) var failedRetrieval = false
    /// `flush_all` delays to schedule (seconds), taken by the loop after each decode.
    @exclusivity(unchecked) var flushDelays: [Int64] = []
    /// Memory limits set by `cache_memlimit` (bytes), applied by the loop after each decode.
    @exclusivity(unchecked) var memoryLimits: [Int] = []
    @exclusivity(unchecked) private var nextID: UInt32 = 0
    /// An `ma` that succeeded, whose line waits for the TTL read after it (``MemcacheMeta``).
    @exclusivity(unchecked) var heldArithmetic: (reply: MemcacheMeta.Reply, cas: UInt64, number: UInt64)?

    /// The node's version, for `version`.
    let version: String
    /// Whether the node has users: a connection's first `set` carries its credentials.
    let requiresAuth: Bool
    /// The longest value a storage command may carry.
    let maximumValueLength: Int
    /// Whether `flush_all` (without a delay) empties every member (a CLEAR with the `cluster` flag).
    let flushesCluster: Bool

    /// What every session of a node shares.
    struct Settings: Sendable {
        let version: String
        let requiresAuth: Bool
        let flushesCluster: Bool
        let maximumValueLength: Int
    }

    init(version: String, requiresAuth: Bool, flushesCluster: Bool = false, maximumValueLength: Int) {
        self.version = version
        self.requiresAuth = requiresAuth
        self.flushesCluster = flushesCluster
        self.maximumValueLength = maximumValueLength
    }

    /// Bytes of native requests made at most (and one more request), beyond which decoding stops until they
    /// are served: a client that pipelines many commands, and does not read its replies, holds this and its
    /// input buffer, as a native client holds its input buffer.
    static let nativeLimit = 32 << 10

    // MARK: Text commands in

    /// Turns the whole commands at the front of `input` into native requests, until `input` holds no whole
    /// command or ``native`` is full; consumes what it turned. `now` converts memcached's absolute expiry
    /// times.
    /// - Returns: whether it made any.
    @discardableResult
    func decode(
        from input: inout CachetByteBuffer,
        now: UInt32,
        output: inout CachetByteBuffer,
        reads: MemoryReads? = nil
    ) -> Bool {
        var made = false
        partialCommandLength = 0
        while !quitting && native.readableBytes < Self.nativeLimit {
            if discarding > 0 {
                let dropped = min(discarding, input.readableBytes)
                input.moveReadIndex(forwardBy: dropped)
                discarding -= dropped
                if discarding > 0 { break }
            }
            guard input.readableBytes > 0 else { break }
            // A `get` or `gets` (the usual command) without the enum of every command.
            if let get = MemcacheTextDecoder.decodeGetLine(input.readableRegion) {
                retrieve(
                    get.keys,
                    withCAS: get.withCAS,
                    touch: nil,
                    in: input.readableRegion,
                    now: now,
                    output: &output,
                    reads: reads
                )
                input.moveReadIndex(forwardBy: get.end)
                made = true
                continue
            }
            let decoding = MemcacheTextDecoder.decode(input.readableRegion, maximumValueLength: maximumValueLength)
            switch consume decoding {
            case .needMore:
                partialCommandLength = MemcacheStorageLine.announcedLength(input.readableRegion)
                return made
            case .command(let command, let end):
                translate(command, in: input.readableRegion, now: now, output: &output, reads: reads)
                input.moveReadIndex(forwardBy: end)
            case .failure(let error, let end, let noreply):
                if error.closesConnection {
                    // A line without its end past the limit: closed without a reply, as memcached does.
                    quitting = true
                    input.moveReadIndex(forwardBy: input.readableBytes)
                    return made
                }
                if case .tooLarge(let key?) = error {
                    appendKeyed(.delete, UnsafeRawBufferPointer(rebasing: input.readableRegion[key]))
                    push(.discard, quiet: true)
                }
                appendLocal(Array(error.line.utf8), quiet: noreply)
                let taken = min(end, input.readableBytes)
                discarding = end - taken
                input.moveReadIndex(forwardBy: taken)
            }
            made = true
        }
        return made
    }

    func beginTurn(
        input: inout CachetByteBuffer,
        output: inout CachetByteBuffer,
        outputLimit: Int,
        now: UInt32,
        host: NodeIOQueue,
        tally: inout RequestTally
    ) {
        // On a node without users or peers, a `get` of what memory holds needs no native request.
        let reads =
            outputLimit > 0 ? host.memcacheInPlace.map { MemoryReads(inPlace: $0, outputLimit: outputLimit) } : nil
        decode(from: &input, now: now, output: &output, reads: reads)
        tally.get &+= answeredFromMemory
        tally.set &+= storedInPlace
        answeredFromMemory = 0
        storedInPlace = 0
        if !flushDelays.isEmpty || !memoryLimits.isEmpty { host.applyNodeRequests(of: self) }
    }

    func exchangeNative(with buffer: inout CachetByteBuffer) {
        swap(&buffer, &native)
    }

    func wantsTurn(input: borrowing CachetByteBuffer, outputBytes: Int) -> Bool {
        hasWholeCommand(in: input)
    }

    func outputSent(_ count: Int) {
        textPending -= count
    }

    /// Whether the input's next command is whole (decoding would make a request), ignoring room.
    func hasWholeCommand(in input: borrowing CachetByteBuffer) -> Bool {
        guard !quitting, input.readableBytes > 0 else { return false }
        if discarding > 0 { return true }
        // A line with its end, of a command without a data block, is whole: known without decoding it (a get
        // of many keys would otherwise be decoded twice, here and when it is served).
        let region = input.readableRegion
        if memchr(region.baseAddress!, 0x0a, region.count) != nil, !Self.mayCarryData(region) { return true }
        if case .needMore = MemcacheTextDecoder.decode(region, maximumValueLength: maximumValueLength) {
            return false
        }
        return true
    }

    /// Whether the line at the front of `bytes` may be a storage command (`set`, `add`, `replace`, `append`,
    /// `prepend`, `cas`, `ms`), whose data block follows it, or starts with a space (decoded to tell).
    private static func mayCarryData(_ bytes: UnsafeRawBufferPointer) -> Bool {
        switch bytes[0] {
        case UInt8(ascii: "s"), UInt8(ascii: "a"), UInt8(ascii: "r"), UInt8(ascii: "p"), UInt8(ascii: "c"), 0x20:
            return true
        case UInt8(ascii: "m"):
            return bytes.count < 2 || bytes[1] == UInt8(ascii: "s")
        default:
            return false
        }
    }

    private func translate(
        _ command: consuming MemcacheTextCommand,
        in buffer: UnsafeRawBufferPointer,
        now: UInt32,
        output: inout CachetByteBuffer,
        reads: MemoryReads?
    ) {
        func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buffer[range]) }
        switch consume command {
        case .store(let verb, let key, let flags, let exptime, let data, let cas, let noreply):
            if requiresAuth && !authenticated && verb == .set {
                return appendAuth(bytes(data), quiet: noreply)
            }
            guard let ttl = Self.ttl(exptime, now: now) else {
                appendKeyed(.delete, bytes(key))
                return push(.storedExpired, quiet: noreply)
            }
            let mode: CachetItemWrite.Mode
            switch verb {
            case .set: mode = .set
            case .add: mode = .add
            case .replace: mode = .replace
            case .append: mode = .append
            case .prepend: mode = .prepend
            case .cas: mode = .compareAndSwap
            }
            // Nothing before it waits for a native reply: done here, its line written (MemcacheInPlace).
            if let reads, contexts.isEmpty, native.readableBytes == 0, inPlaceAllowance > 0,
                output.readableBytes + 256 <= reads.outputLimit,
                reads.inPlace.store(
                    mode,
                    key: bytes(key),
                    flags: flags,
                    cas: cas ?? 0,
                    data: bytes(data),
                    ttl: ttl,
                    noreply: noreply,
                    now: now,
                    session: self,
                    output: &output
                )
            {
                storedInPlace &+= 1
                textPending = output.readableBytes
                return
            }
            appendItemWrite(mode, key: bytes(key), flags: flags, cas: cas ?? 0, data: bytes(data), ttl: ttl)
            push(.stored, quiet: noreply)
        case .retrieve(let keys, let withCAS, let touch):
            retrieve(keys, withCAS: withCAS, touch: touch, in: buffer, now: now, output: &output, reads: reads)
        case .delete(let key, let noreply):
            appendKeyed(.delete, bytes(key))
            push(.deleted, quiet: noreply)
        case .arithmetic(let increment, let key, let delta, let noreply):
            withUnsafeBytes(of: delta.bigEndian) {
                appendItemWrite(increment ? .increment : .decrement, key: bytes(key), data: $0)
            }
            push(.number, quiet: noreply)
        case .touch(let key, let exptime, let noreply):
            if let ttl = Self.ttl(exptime, now: now) {
                appendItemWrite(.touch, key: bytes(key), ttl: ttl)
                push(.touched, quiet: noreply)
            } else {
                appendKeyed(.delete, bytes(key))
                push(.touched, quiet: noreply)
            }
        case .flushAll(var delay, let noreply):
            // Past 30 days, a Unix time (as an expiry is).
            if delay > 2_592_000 { delay = max(0, delay - Int64(now)) }
            if delay > 0 {
                flushDelays.append(delay)
                appendEmpty(.ping)
            } else {
                appendEmpty(.clear, flags: flushesCluster ? .cluster : [])
            }
            push(.ok, quiet: noreply)
        case .cacheMemoryLimit(let megabytes, let noreply):
            memoryLimits.append(Int(megabytes) << 20)
            appendEmpty(.ping)
            push(.ok, quiet: noreply)
        case .version:
            appendLocal(MemcacheTextReply.version(version), quiet: false)
        case .verbosity(let noreply):
            appendEmpty(.ping)
            push(.ok, quiet: noreply)
        case .stats(let argument):
            if argument == nil {
                appendEmpty(.stats)
                push(.stats, quiet: false)
            } else {
                // Groups of memcached's internals (settings, items, slabs, conns...): none to report.
                appendLocal(MemcacheTextReply.end, quiet: false)
            }
        case .quit:
            quitting = true
        case .meta(let meta):
            MemcacheMeta.translate(meta, in: buffer, now: now, session: self)
        }
    }

    /// `get`, `gets`, `gat` or `gats` of `keys` in `buffer`: the keys memory holds answered here while nothing
    /// before waits for a native reply (``MemcacheInPlace``), the others turned into native GETs (or
    /// get-and-touches).
    private func retrieve(
        _ keys: MemcacheKeyList,
        withCAS: Bool,
        touch: Int64?,
        in buffer: UnsafeRawBufferPointer,
        now: UInt32,
        output: inout CachetByteBuffer,
        reads: MemoryReads?
    ) {
        func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buffer[range]) }
        var answered = 0
        if touch == nil, let reads, contexts.isEmpty, native.readableBytes == 0 {
            // Nothing before it waits for a native reply: the keys memory holds are answered here, in
            // order, up to the first one that needs a native GET.
            answered = reads.inPlace.answer(
                keys,
                withCAS: withCAS,
                in: buffer,
                now: now,
                allowance: inPlaceAllowance,
                outputLimit: reads.outputLimit,
                output: &output
            )
            answeredFromMemory &+= answered
            if answered == keys.count {
                MemcacheReplies.appendEnd(to: &output)
                textPending = output.readableBytes
                return
            }
            textPending = output.readableBytes
        }
        for (index, key) in keys.ranges(in: buffer).enumerated() where index >= answered {
            let expired = touch.map { Self.ttl($0, now: now) == nil } ?? false
            if let touch, let ttl = Self.ttl(touch, now: now) {
                appendItemWrite(.getAndTouch, key: bytes(key), ttl: ttl)
            } else {
                appendKeyed(.get, bytes(key), flags: .item)
            }
            replyKeys.append(bytes(key))
            push(.value(keyLength: key.count, withCAS: withCAS, last: index == keys.count - 1), quiet: false)
            if expired {
                // Touched into the past: answered with the item, which is gone after (as memcached does).
                appendKeyed(.delete, bytes(key))
                push(.discard, quiet: true)
            }
        }
    }

    /// Bytes of the command at the front of the input that is not whole yet, when its line announces a data
    /// block (a storage command): the line, the data block and its line end; 0 otherwise. The connection
    /// grows its input towards it as towards a native frame's length (``Connection/prepareInput(frameLength:)``:
    /// a step at a time, the budget charged for it), rather than by a read's room at a time: a set of 1 MB took
    /// some 500 reads, and as many regrowths of the input, before.
    @exclusivity(unchecked) private(set) var partialCommandLength = 0

    /// What a turn may answer in place (``MemcacheInPlace``): the loop's answers, and the most the output may
    /// hold.
    struct MemoryReads {
        let inPlace: MemcacheInPlace
        let outputLimit: Int
    }

    /// Storage commands done in place this turn (for the turn's latency tally).
    @exclusivity(unchecked) private var storedInPlace = 0

    /// Keys and storage commands a turn answers in place at most: past them, the native path takes the rest,
    /// and its turns yield to the other connections (a pipeline of `set ... noreply`, which writes nothing,
    /// would otherwise be done whole in one turn).
    static let inPlacePerTurn = 64

    /// Keys of `get`s answered from memory this turn (for the turn's latency tally).
    @exclusivity(unchecked) private var answeredFromMemory = 0

    /// Keys and storage commands the turn may still answer in place.
    private var inPlaceAllowance: Int { Self.inPlacePerTurn - answeredFromMemory - storedInPlace }

    /// memcached's expiry as a TTL: 0 never; up to 30 days, seconds from now; beyond, a Unix time. Nil when it
    /// is already past (negative, or a Unix time not in the future).
    static func ttl(_ exptime: Int64, now: UInt32) -> UInt32? {
        if exptime == 0 { return 0 }
        if exptime < 0 { return nil }
        if exptime <= 2_592_000 { return UInt32(exptime) }
        let left = exptime - Int64(now)
        guard left > 0 else { return nil }
        return UInt32(clamping: left)
    }

    // MARK: Native requests

    func push(_ reply: Reply, quiet: Bool) {
        contexts.append(Pending(reply: reply, quiet: quiet))
    }

    private func takeID() -> UInt32 {
        nextID &+= 1
        return nextID
    }

    /// A PING answered by `line` (in its turn among the replies).
    func appendLocal(_ line: [UInt8], quiet: Bool) {
        appendEmpty(.ping)
        push(.literal(line), quiet: quiet)
    }

    func appendEmpty(_ opcode: CachetOpcode, flags: CachetRequestFlags = []) {
        appendFrame(opcode, flags: flags, bodyLength: 0) { _ in }
    }

    func appendKeyed(_ opcode: CachetOpcode, _ key: UnsafeRawBufferPointer, flags: CachetRequestFlags = []) {
        appendFrame(opcode, flags: flags, bodyLength: 2 + key.count) { native in
            withUnsafeBytes(of: UInt16(key.count).bigEndian) { native.append($0) }
            native.append(key)
        }
    }

    func appendItemWrite(
        _ mode: CachetItemWrite.Mode,
        key: UnsafeRawBufferPointer,
        flags: UInt32 = 0,
        cas: UInt64 = 0,
        data: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0),
        ttl: UInt32 = 0,
        newCAS: UInt64? = nil
    ) {
        let length =
            CachetProtocol.putBodyPrefixSize + key.count + CachetItemWrite.headerSize + (newCAS == nil ? 0 : 8)
            + data.count
        appendFrame(.put, flags: .item, bodyLength: length) { native in
            withUnsafeBytes(of: ttl.bigEndian) { native.append($0) }
            withUnsafeBytes(of: UInt16(key.count).bigEndian) { native.append($0) }
            native.append(key)
            native.append(CachetItemWrite.encodeHeader(mode: mode, flags: flags, cas: cas, newCAS: newCAS))
            if data.count > 0 { native.append(data) }
        }
    }

    /// The credentials of memcached's authentication (`set` with `user password` as its data) as an AUTH.
    private func appendAuth(_ data: UnsafeRawBufferPointer, quiet: Bool) {
        let text = Array(data)
        let space = text.firstIndex(of: UInt8(ascii: " ")) ?? text.count
        let user = Array(text[..<space])
        var secret = space < text.count ? Array(text[(space + 1)...]) : []
        while secret.last == UInt8(ascii: "\n") || secret.last == UInt8(ascii: "\r") { secret.removeLast() }
        appendFrame(.auth, flags: [], bodyLength: 2 + user.count + secret.count) { native in
            withUnsafeBytes(of: UInt16(user.count).bigEndian) { native.append($0) }
            native.append(user)
            native.append(secret)
        }
        push(.authenticated, quiet: quiet)
    }

    private func appendFrame(
        _ opcode: CachetOpcode,
        flags: CachetRequestFlags,
        bodyLength: Int,
        _ body: (inout CachetByteBuffer) -> Void
    ) {
        native.appendRequestFrame(opcode, flags: flags, id: takeID(), bodyLength: bodyLength, body)
    }

    // MARK: Replies out

    /// Values at least this long go out by ``sendValue(_:flags:cas:output:send:)``. Higher than a native GET's
    /// threshold: the line end and `END` after the value take a send of their own, which costs more than
    /// copying a value of 16 KiB twice (measured: 16 KiB gets at 0.65 of the copying path's rate when sent
    /// directly) and much less than copying one of 1 MB.
    static let directValueThreshold = 64 * 1024

    /// Sends the hit of the `get` key whose reply is due next straight to the socket: its VALUE line and
    /// `value` in one `writev`, then `\r\n` (and `END` after a command's last key) queued with whatever the
    /// socket did not take, as text. Only while nothing waits in `output` (so this reply is the next one and
    /// the order holds).
    /// - Returns: false, doing nothing, when the reply due is not a plain `get`'s value, or an earlier key
    ///   of its command failed.
    func sendValue(
        _ value: UnsafeRawBufferPointer,
        flags: UInt32,
        cas: UInt64,
        output: inout CachetByteBuffer,
        send: DirectSend
    ) -> Bool {
        guard output.readableBytes == 0, !failedRetrieval, let pending = contexts.first,
            case .value(let keyLength, let withCAS, let last) = pending.reply
        else { return false }
        _ = contexts.removeFirst()
        let key = UnsafeRawBufferPointer(rebasing: replyKeys.readableRegion[..<keyLength])
        withUnsafeTemporaryAllocation(
            byteCount: MemcacheTextReply.valueLineCapacity(keyLength: keyLength),
            alignment: 1
        ) { line in
            let count = MemcacheTextReply.writeValueLine(
                key: key,
                flags: flags,
                length: value.count,
                cas: withCAS ? cas : nil,
                to: line.baseAddress!
            )
            send.send(UnsafeRawBufferPointer(rebasing: line[0..<count]), value, queueingTheRestIn: &output)
        }
        output.append("\r\n" as StaticString)
        if last { MemcacheReplies.appendEnd(to: &output) }
        replyKeys.moveReadIndex(forwardBy: keyLength)
        textPending = output.readableBytes
        return true
    }

    /// Turns the native replies appended to `output` since the last call into memcached's lines (the text
    /// before them is left as it is).
    func translateReplies(in output: inout CachetByteBuffer) {
        let untranslated = output.readableBytes - textPending
        guard untranslated > 0 else { return }
        // The lines are written into a scratch buffer kept from send to send (shrunk when a large reply grew it).
        scratch.clear()
        scratch.shrinkIfEmpty(above: 1 << 20, to: 4096)
        forEachNativeReply(in: UnsafeRawBufferPointer(rebasing: output.readableRegion[textPending...])) {
            header,
            body in
            guard let pending = contexts.removeFirst() else { return }
            MemcacheReplies.append(pending, status: header.status, body: body, session: self, to: &scratch)
        }
        // Nothing of the text before is still unsent (the usual case): the lines become the output as they
        // are, and the native replies' buffer is the next scratch, saving a copy of every value.
        output.replaceTranslated(after: textPending, with: &scratch)
        textPending = output.readableBytes
        // A get of many long keys grew it: back to its size once its keys are answered.
        replyKeys.shrinkIfEmpty(above: 64 << 10, to: 1024)
    }

    /// The buffer ``translateReplies(in:)`` writes lines into, kept between sends.
    @exclusivity(unchecked) private var scratch = CachetByteBuffer(capacity: 4096)

    var bufferFootprint: Int {
        // The native requests take the connection's input's place during a turn; between turns they are here.
        max(0, native.capacity - 4096) + max(0, replyKeys.capacity - 1024) + max(0, scratch.capacity - 4096)
    }

    func trimBuffers(tight: Bool) {
        // A set's data block grows the native requests to its length; nothing needs them kept once served.
        native.trimIfEmpty(initial: 4096, retained: Self.nativeLimit + 4096, tight: tight)
        replyKeys.trimIfEmpty(initial: 1024, retained: 64 << 10, tight: tight)
        scratch.trimIfEmpty(initial: 4096, retained: 256 << 10, tight: tight)
    }
}
