import CachetCluster
import CachetIO
import CachetStore
import CachetWire

/// What a node gives its peers from its memory tier, and takes from them: warm-up after a membership change
/// (`Protocol/CLUSTER.md`, "Warm-up after a membership change") and the values a stand-in hands back to a
/// returned owner ("Handing back values").
///
/// Made per use from the loop's commands and router; used on the loop's queue.
struct PeerValues {
    let commands: NodeCommands
    let cluster: RequestRouter

    private var counters: RequestCounters { commands.counters }

    /// The warm-up request for `key`, which this node missed (``NodeWarmUp``): a GET with `forwarded`,
    /// `lastHop` and `warmUp` to the key's previous owner, with half the forward deadline; nil when the key
    /// is not one to warm.
    func warmUpRequest(_ key: UnsafeRawBufferPointer, id: UInt32) -> PendingOperation? {
        guard let warmUp = cluster.warmUp, let source = warmUp.source(for: key),
            cluster.router.foreignOwner(of: key) == nil
        else { return nil }
        let frame = CachetCommand.get(key: Array(key)).encoded(id: 0, flags: [.forwarded, .lastHop, .warmUp])
        return .forward(
            ForwardRequest(frame: frame, opcode: .get, id: id, owner: source, secondHop: true, warmUp: true)
        )
    }

    /// A peer's warm-up GET (`forwarded` and `warmUp`): the value, its body the TTL left (4 bytes,
    /// big-endian seconds, 0 for none) and the value, when this node owns the key or owned it before a
    /// recent membership change (``NodeWarmUp/servesWarmUp(_:)``: it is where the writes went); a miss
    /// otherwise, while this node holds (its values may be older than a stand-in's), or when neither tier
    /// has a live value. A value only in the disk tier is read there (the returned operation), and not
    /// kept in memory here: the key belongs to the member that asked.
    func serveWarmUp(_ key: UnsafeRawBufferPointer, id: UInt32, output: inout CachetByteBuffer, now: UInt32)
        -> PendingOperation?
    {
        RequestCounters.bump(counters.gets)
        let ownedBefore = cluster.warmUp?.servesWarmUp(key) ?? false
        guard ownedBefore, cluster.hold?.isHolding() != true else {
            Self.appendWarmUpReply(nil, id: id, counters: counters, output: &output, now: now)
            return nil
        }
        let served = commands.store.withValue(forKey: key, now: now) { value, expiry -> Bool in
            guard expiry == 0 || expiry > now else { return false }
            Self.appendWarmUpReply((value, expiry), id: id, counters: counters, output: &output, now: now)
            return true
        }
        if served == true { return nil }
        if let disk = commands.disk, disk.worker.mayHold(key: key, now: now) {
            return .get(key: Array(key), id: id, warmUp: true)
        }
        Self.appendWarmUpReply(nil, id: id, counters: counters, output: &output, now: now)
        return nil
    }

    /// Answers a warm-up GET whose key was read from the disk tier (``serveWarmUp(_:id:output:now:)``).
    static func completeWarmUpRead(
        id: UInt32,
        entry: CachetDiskEntry?,
        counters: RequestCounters,
        output: inout CachetByteBuffer,
        now: UInt32
    ) {
        guard let entry else {
            return appendWarmUpReply(nil, id: id, counters: counters, output: &output, now: now)
        }
        entry.value.withUnsafeBytes { value in
            appendWarmUpReply((value, entry.expiry), id: id, counters: counters, output: &output, now: now)
        }
    }

    /// A warm-up GET's reply: OK with the TTL left (4 bytes, big-endian seconds, 0 for none) before the
    /// value, or NOT_FOUND for none or an expired one; counted as a hit or a miss.
    private static func appendWarmUpReply(
        _ found: (value: UnsafeRawBufferPointer, expiry: UInt32)?,
        id: UInt32,
        counters: RequestCounters,
        output: inout CachetByteBuffer,
        now: UInt32
    ) {
        guard let (value, expiry) = found, expiry == 0 || expiry > now else {
            RequestCounters.bump(counters.misses)
            appendReply(opcode: .get, status: .notFound, id: id, to: &output)
            return
        }
        RequestCounters.bump(counters.hits)
        appendValueWithTTL(value, expiry: expiry, id: id, output: &output, now: now)
    }

    /// A warm-up's answer for the client: the value, kept in memory with the TTL it had left, when the
    /// previous owner had it and no write of the key was noted meanwhile; a miss otherwise (never
    /// UNAVAILABLE: the key was only asked for because it missed here).
    func completeWarmUp(_ request: ForwardRequest, _ outcome: ForwardOutcome, output: inout CachetByteBuffer) {
        let warmUp = cluster.warmUp
        // A value longer than --large-value is not held whole in memory: a miss, stored again by its loader.
        if case .answered(.ok, let body) = outcome, body.count >= 4, body.count - 4 <= commands.largeValueThreshold,
            let warmUp,
            let key = request.key
        {
            let ttl = UInt32(body[0]) << 24 | UInt32(body[1]) << 16 | UInt32(body[2]) << 8 | UInt32(body[3])
            let now = CachetClock.now()
            let expiry = ttl == 0 ? 0 : now &+ ttl
            let kept = warmUp.keep(key) {
                key.withUnsafeBytes { key in
                    body.withUnsafeBytes { body in
                        _ = commands.store.put(
                            key: key,
                            value: UnsafeRawBufferPointer(rebasing: body[4...]),
                            expiry: expiry,
                            now: now
                        )
                    }
                }
            }
            if kept {
                warmUp.hits.add(1, ordering: .relaxed)
                RequestCounters.bump(counters.hits)
                body.withUnsafeBytes {
                    appendReply(
                        opcode: .get,
                        status: .ok,
                        id: request.id,
                        body: UnsafeRawBufferPointer(rebasing: $0[4...]),
                        to: &output
                    )
                }
                return
            }
        }
        warmUp?.misses.add(1, ordering: .relaxed)
        RequestCounters.bump(counters.misses)
        appendReply(opcode: .get, status: .notFound, id: request.id, to: &output)
    }
}
