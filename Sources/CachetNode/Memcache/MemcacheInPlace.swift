import CachetIO
import CachetMemcache
import CachetWire

/// What a memcached connection answers itself, with no native request between (``MemcacheSession``), on a
/// node without users or peers, where a native request would only come back to the same commands: `get`s of
/// what memory holds, and, on a node without a disk tier (where a write never waits), the storage commands.
/// One per loop, made once: a session reaches the commands through it, not through a copy of
/// ``NodeCommands`` each turn (which would retain each of its references).
final class MemcacheInPlace {
    /// The loop's commands, for the storage commands.
    let commands: NodeCommands
    /// The reads of memory.
    let reader: MemoryItemReader
    /// Whether storage commands are done in place too: the node has no disk tier.
    let stores: Bool

    init(commands: NodeCommands) {
        self.commands = commands
        reader = MemoryItemReader(
            store: commands.store,
            diskWorker: commands.disk?.worker,
            counters: commands.counters,
            casSource: commands.casSource
        )
        stores = commands.disk == nil
    }

    /// Answers the keys of a `get` or `gets` that memory holds (or that nothing holds) straight into
    /// `output` as VALUE lines, in order, until one needs a native GET: one the disk tier may hold, a value
    /// of ``MemcacheSession/directValueThreshold`` or more (sent from its entry by the native path), a reply
    /// with no room under `outputLimit` (room for a miss's `END` kept), or past `allowance` keys. Counted as
    /// native GETs are (once per command). One copy of the value, where the native path makes two (callgrind's GET of 16 KiB:
    /// 19,959 instructions against 38,196).
    /// - Returns: how many keys, from the first, were answered.
    func answer(
        _ keys: MemcacheKeyList,
        withCAS: Bool,
        in buffer: UnsafeRawBufferPointer,
        now: UInt32,
        allowance: Int,
        outputLimit: Int,
        output: inout CachetByteBuffer
    ) -> Int {
        var answered = 0
        var hits = 0
        defer { reader.count(hits: hits, misses: answered - hits) }
        for range in keys.ranges(in: buffer) {
            guard answered < allowance, output.readableBytes + 64 <= outputLimit else { break }
            let key = UnsafeRawBufferPointer(rebasing: buffer[range])
            let read = reader.read(key, now: now, givingCAS: withCAS) { value, flags, cas in
                guard value.count < MemcacheSession.directValueThreshold,
                    output.readableBytes + MemcacheReplies.valueRoom(keyLength: key.count, valueLength: value.count)
                        <= outputLimit
                else { return false }
                MemcacheReplies.appendValue(key: key, flags: flags, cas: withCAS ? cas : nil, value: value, to: &output)
                return true
            }
            if read == .elsewhere { break }
            if read == .hit { hits += 1 }
            answered += 1
        }
        return answered
    }

    /// Does a storage command at once and writes its reply line (none for a `noreply` one that succeeds):
    /// the data block goes from the input to its entry, with no copy into a native request between. A `set`
    /// without flags is stored as a native PUT, without item fields (12 bytes an item fewer; a `gets` gives
    /// the item a CAS unique when one is asked for).
    /// - Returns: false, doing nothing, on a node with a disk tier (whose writes may wait for its queue).
    func store(
        _ mode: CachetItemWrite.Mode,
        key: UnsafeRawBufferPointer,
        flags: UInt32,
        cas: UInt64,
        data: UnsafeRawBufferPointer,
        ttl: UInt32,
        noreply: Bool,
        now: UInt32,
        session: MemcacheSession,
        output: inout CachetByteBuffer
    ) -> Bool {
        guard stores else { return false }
        var refusal: (CachetStatus, String)?
        if mode == .set && flags == 0 {
            switch commands.put(key: key, value: data, ttl: ttl, now: now) {
            case .stored: break
            case .tooLarge(let message): refusal = (.tooLarge, message)
            case .failed(let error): refusal = (.serverError, error.message)
            case .waitingForDisk: refusal = (.serverError, "the disk queue is full")
            }
        } else {
            let outcome = commands.writeItem(
                key,
                mode: mode,
                flags: flags,
                cas: cas,
                data: data,
                ttl: ttl,
                now: now,
                diskChecked: false
            )
            guard case .answered(let reply) = outcome else { return false }
            if case .refused(let status, let message) = reply { refusal = (status, message) }
        }
        var message = refusal?.1 ?? ""
        message.withUTF8 {
            MemcacheReplies.append(
                MemcacheSession.Pending(reply: .stored, quiet: noreply),
                status: refusal?.0 ?? .ok,
                body: UnsafeRawBufferPointer($0),
                session: session,
                to: &output
            )
        }
        return true
    }
}
