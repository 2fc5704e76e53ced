import CachetMemcache
import CachetStore
import CachetWire

/// What an item write (a PUT with the `item` flag, `Protocol/PROTOCOL.md`, "Items: flags, CAS and
/// conditional writes") answers.
enum ItemReply {
    /// Stored, with the item's CAS unique.
    case stored(cas: UInt64)
    /// Stored by ``CachetWire/CachetItemWrite/Mode/compareAndSwapOrStale`` with an older CAS unique: the
    /// item stays stale. Answered as ``stored(cas:)``.
    case storedStale(cas: UInt64)
    /// Stored by an append or a prepend: the item's CAS unique and its value's new length.
    case storedLength(cas: UInt64, length: Int)
    /// A meta get (``CachetWire/CachetItemWrite/Mode/metaGet``): the item, the seconds it has left (0: no
    /// expiry), its state, and the seconds since it was last read or written when asked for.
    case metaItem(
        flags: UInt32,
        cas: UInt64,
        ttl: UInt32,
        state: CachetItemWrite.MetaState,
        idle: UInt32?,
        value: [UInt8]
    )
    /// An increment or decrement: the item's CAS unique and the number it now holds.
    case number(cas: UInt64, value: UInt64)
    /// A get-and-touch: the item.
    case item(flags: UInt32, cas: UInt64, value: [UInt8])
    /// Not done: NOT_STORED, NOT_FOUND, EXISTS, BAD_REQUEST or TOO_LARGE, and why.
    case refused(CachetStatus, String)
}

/// What an item write came to.
enum ItemOutcome {
    /// Done (or refused): answer now.
    case answered(ItemReply)
    /// The write reads the item, memory missed it, and the disk tier may hold it: read it there first
    /// (``PendingOperation/itemWrite(_:)``), then write again.
    case readDiskFirst
    /// Stored in memory; its disk write waits for room in the bounded disk queue (answered once queued).
    indirect case waitingForDisk(ItemDiskWrite)
    /// The disk journal could not record it; it is not stored.
    indirect case failed(CachetStoreError)
}

/// An item write that waits for the disk queue, and the reply it gets once queued.
struct ItemDiskWrite {
    let key: [UInt8]
    let value: [UInt8]
    let expiry: UInt32
    let fields: CachetItemFields?
    let reply: ItemReply
    let id: UInt32

    /// The same write with another reply or request id.
    func replacing(reply: ItemReply? = nil, id: UInt32? = nil) -> ItemDiskWrite {
        ItemDiskWrite(
            key: key,
            value: value,
            expiry: expiry,
            fields: fields,
            reply: reply ?? self.reply,
            id: id ?? self.id
        )
    }
}

/// An item write copied out of the connection's input, to be done again once the disk tier was read.
struct ItemWriteRequest {
    let key: [UInt8]
    let mode: CachetItemWrite.Mode
    let flags: UInt32
    let cas: UInt64
    let data: [UInt8]
    let ttl: UInt32
    let id: UInt32
    let newCAS: UInt64?
}

/// memcached's storage, arithmetic and touch commands on one item, each done in one step under the memory
/// shard's lock (``CachetStore/CachetMemoryStore/update(forKey:now:_:)``), then written through to the disk
/// tier with the item's fields, as any PUT is.
extension NodeCommands {
    /// Does an item write on `key`.
    /// - Parameters:
    ///   - data: the bytes to store, or the delta (8 bytes, big-endian) of an increment or decrement.
    ///   - diskChecked: whether the disk tier was read for the key already (a memory miss then reads
    ///     `diskEntry`: what the disk tier held, if no write of the key came since it was read).
    func writeItem(
        _ key: UnsafeRawBufferPointer,
        mode: CachetItemWrite.Mode,
        flags: UInt32,
        cas: UInt64,
        data: UnsafeRawBufferPointer,
        ttl: UInt32,
        now: UInt32,
        diskChecked: Bool,
        diskEntry: CachetDiskEntry? = nil,
        keepingLease: Bool = false,
        newCAS: UInt64? = nil,
        markingRead: Bool = true
    ) -> ItemOutcome {
        if mode != .set, !diskChecked, let disk,
            store.withValue(forKey: key, now: now, marking: false, { _, _ in true }) == nil,
            disk.worker.mayHold(key: key, now: now)
        {
            return .readDiskFirst
        }
        if mode == .metaGet, let options = CachetItemWrite.MetaGetOptions.decode(data) {
            return metaGet(key, options: options, ttl: ttl, now: now, diskEntry: diskEntry, newCAS: newCAS)
        }
        if mode == .getAndTouch {
            RequestCounters.bump(counters.gets)
        } else if mode != .delete {
            RequestCounters.bump(counters.puts)
        }
        let limit = largeValueThreshold
        if data.count > limit {
            return .answered(.refused(.tooLarge, Self.itemTooLong(data.count, limit: limit)))
        }
        var mode = mode
        if mode != .set && mode != .touch && mode != .getAndTouch {
            // A conditional write that is refused is not a write: it leaves the key's lease and staleness as
            // they were (memcached's recache winner keeps its win whatever others try). Judged on the item as
            // it is now; one that goes ahead ends them first, as any write does, and is judged again in step.
            let current =
                store.withItem(forKey: key, now: now, marking: false) { _, _, fields in fields?.cas ?? 0 }
                ?? diskEntry.flatMap { CachetClock.isExpired($0.expiry, now: now) ? nil : $0.fields?.cas ?? 0 }
            if let refusal = Self.refusal(mode: mode, cas: cas, data: data, currentCAS: current) {
                return .answered(refusal)
            }
            if mode == .compareAndSwapOrStale && cas != 0 && current == cas { mode = .compareAndSwap }
        }
        // A write of the value ends the key's lease and its staleness; a touch changes neither, nor does a
        // write of an older version (compareAndSwapOrStale), which leaves the item stale.
        if !keepingLease && ![.touch, .getAndTouch, .compareAndSwapOrStale].contains(mode) { leases.invalidate(key) }
        disk?.worker.beginWrite(key: key)
        let expiry = Self.expiry(ttl: ttl, now: now)
        if mode == .set {
            // Reads nothing: stored straight from the request's bytes, without the update's copy.
            let fields = CachetItemFields(flags: flags, cas: newCAS ?? casSource.next())
            guard store.put(key: key, value: data, expiry: expiry, now: now, fields: fields) == .stored else {
                disk?.worker.abandonWrite(key: Array(key))
                return .answered(
                    .refused(.tooLarge, "item of \(key.count + data.count) bytes does not fit --memory-limit")
                )
            }
            return writeThrough(
                key,
                value: data,
                expiry: expiry,
                fields: fields,
                reply: .stored(cas: fields.cas),
                now: now
            )
        }
        let source = casSource
        let nextCAS: () -> UInt64 = newCAS.map { unique in { unique } } ?? source.next
        var written: (value: [UInt8], expiry: UInt32, fields: CachetItemFields?)?
        let diskValue = diskEntry?.value ?? []
        let (reply, outcome) = diskValue.withUnsafeBytes { diskValue in
            // A touch keeps the item's marks (memcached touches in place); a get-and-touch is a read too.
            store.update(
                forKey: key,
                now: now,
                keepingReadState: mode == .touch || mode == .getAndTouch,
                markingRead: mode == .getAndTouch && markingRead
            ) { current -> (CachetItemUpdate, ItemReply) in
                // A value memory does not hold (one kept on disk only, longer than --large-value) is read from disk.
                let onDisk = diskEntry.map { CachetMemoryItem(value: diskValue, expiry: $0.expiry, fields: $0.fields) }
                let decision = Self.decide(
                    mode: mode,
                    flags: flags,
                    cas: cas,
                    data: data,
                    expiry: expiry,
                    current: current ?? onDisk,
                    limit: limit,
                    nextCAS: nextCAS
                )
                if case .store(let value, let expiry, let fields) = decision.0 { written = (value, expiry, fields) }
                return decision
            }
        }
        if mode == .delete, case .stored = reply {
            // Removed from memory (if it was there): the disk tier removes it behind its queued writes.
            RequestCounters.bump(counters.deletes)
            if let disk, case .refused(let error) = disk.worker.submitRemove(key: Array(key)) { return .failed(error) }
            watches.publish(.delete, key: key, view: watchView)
            return .answered(reply)
        }
        switch reply {
        case .storedStale(let unique) where outcome == .stored:
            leases.markStale(key, cas: unique, endingLease: false)
        case .stored where mode == .compareAndSwapOrStale && outcome == .stored:
            leases.invalidate(key)
        case .stored(let unique) where mode == .invalidate && outcome == .stored:
            if data.first.map({ CachetItemWrite.InvalidateOptions(rawValue: $0).contains(.stale) }) == true {
                leases.markStale(key, cas: unique, endingLease: true)
            }
        default:
            break
        }
        guard let written, outcome == .stored else {
            disk?.worker.abandonWrite(key: Array(key))
            if outcome == .tooLarge {
                return .answered(
                    .refused(.tooLarge, "item of \(key.count + data.count) bytes does not fit --memory-limit")
                )
            }
            if case .item = reply { RequestCounters.bump(counters.hits) }
            if case .refused(.notFound, _) = reply, mode == .getAndTouch { RequestCounters.bump(counters.misses) }
            return .answered(reply)
        }
        if mode == .getAndTouch { RequestCounters.bump(counters.hits) }
        return written.value.withUnsafeBytes {
            writeThrough(key, value: $0, expiry: written.expiry, fields: written.fields, reply: reply, now: now)
        }
    }

    /// After an item is stored in memory: its WATCH change, and its disk write (queued, or waiting for room).
    private func writeThrough(
        _ key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        expiry: UInt32,
        fields: CachetItemFields?,
        reply: ItemReply,
        now: UInt32
    ) -> ItemOutcome {
        watches.publish(.put, key: key, value: value, ttl: expiry == 0 ? 0 : expiry &- now, view: watchView)
        guard let disk else { return .answered(reply) }
        let keyBytes = Array(key)
        let valueBytes = Array(value)
        switch disk.worker.submitPut(key: keyBytes, value: valueBytes, expiry: expiry, fields: fields) {
        case .queued:
            return .answered(reply)
        case .full:
            return .waitingForDisk(
                ItemDiskWrite(key: keyBytes, value: valueBytes, expiry: expiry, fields: fields, reply: reply, id: 0)
            )
        case .refused(let error):
            forgetRefusedPut(key: keyBytes, now: now)
            return .failed(error)
        }
    }

    /// Why an item longer than memory takes for items is refused.
    static func itemTooLong(_ length: Int, limit: Int) -> String {
        "an item of \(length) bytes is longer than --large-value \(limit): items are held in memory"
    }

    /// The refusal a conditional write gets from the item as it is (`currentCAS`: its CAS unique, 0 for an
    /// item without one; nil: no item), before anything changes; nil when it may go ahead. The same refusals,
    /// in the same words, as ``decide(mode:flags:cas:data:expiry:current:limit:nextCAS:)`` makes.
    static func refusal(mode: CachetItemWrite.Mode, cas: UInt64, data: UnsafeRawBufferPointer, currentCAS: UInt64?)
        -> ItemReply?
    {
        let matches = cas == 0 || currentCAS == cas
        switch mode {
        case .add:
            return currentCAS == nil ? nil : .refused(.notStored, "add: the key holds a value")
        case .replace:
            return currentCAS != nil ? nil : .refused(.notStored, "replace: the key holds no value")
        case .append, .prepend:
            guard currentCAS != nil else {
                return .refused(.notStored, "\(mode == .append ? "append" : "prepend"): the key holds no value")
            }
            return matches ? nil : .refused(.exists, "append: the item changed since its CAS unique was read")
        case .appendOrCreate, .prependOrCreate:
            return currentCAS == nil || matches
                ? nil : .refused(.exists, "append: the item changed since its CAS unique was read")
        case .compareAndSwap:
            guard let currentCAS else { return .refused(.notFound, "cas: the key holds no value") }
            // (0 is no CAS unique: an item without one matches none.)
            return currentCAS != 0 && currentCAS == cas
                ? nil : .refused(.exists, "cas: the item changed since its CAS unique was read")
        case .compareAndSwapOrStale:
            guard let currentCAS else { return .refused(.notFound, "cas: the key holds no value") }
            return cas <= currentCAS ? nil : .refused(.exists, "cas: the item changed since its CAS unique was read")
        case .increment, .decrement:
            guard currentCAS != nil else {
                return data.count == 16 ? nil : .refused(.notFound, "incr/decr: the key holds no value")
            }
            return matches ? nil : .refused(.exists, "incr/decr: the item changed since its CAS unique was read")
        case .delete:
            guard currentCAS != nil else { return .refused(.notFound, "delete: the key holds no value") }
            return matches ? nil : .refused(.exists, "delete: the item changed since its CAS unique was read")
        case .invalidate:
            guard currentCAS != nil else { return .refused(.notFound, "invalidate: the key holds no value") }
            return matches ? nil : .refused(.exists, "invalidate: the item changed since its CAS unique was read")
        case .set, .touch, .getAndTouch, .metaGet:
            return nil
        }
    }

    /// What an item write does with the key's current entry (nil: none), and its reply.
    static func decide(
        mode: CachetItemWrite.Mode,
        flags: UInt32,
        cas: UInt64,
        data: UnsafeRawBufferPointer,
        expiry: UInt32,
        current: CachetMemoryItem?,
        limit: Int,
        nextCAS: () -> UInt64
    ) -> (CachetItemUpdate, ItemReply) {
        func store(_ value: [UInt8], expiry: UInt32, flags: UInt32) -> (CachetItemUpdate, ItemReply) {
            guard value.count <= limit else {
                return (.keep, .refused(.tooLarge, itemTooLong(value.count, limit: limit)))
            }
            let unique = nextCAS()
            return (
                .store(value: value, expiry: expiry, fields: CachetItemFields(flags: flags, cas: unique)),
                .stored(cas: unique)
            )
        }
        /// An append's reply: stored, with the value's new length.
        func lengthOf(_ outcome: (CachetItemUpdate, ItemReply), _ length: Int) -> (CachetItemUpdate, ItemReply) {
            guard case .stored(let unique) = outcome.1 else { return outcome }
            return (outcome.0, .storedLength(cas: unique, length: length))
        }
        // Every refusal that depends on whether the item is there and on its CAS unique: the same judgement the
        // write got before its lease was touched (``refusal(mode:cas:data:currentCAS:)``).
        if let refusal = refusal(mode: mode, cas: cas, data: data, currentCAS: current.map { $0.fields?.cas ?? 0 }) {
            return (.keep, refusal)
        }
        /// The reply of a mode that needs an item, on a miss (what the judgement above gives it).
        func absent() -> (CachetItemUpdate, ItemReply) {
            (.keep, refusal(mode: mode, cas: cas, data: data, currentCAS: nil) ?? .refused(.notFound, "no value"))
        }
        switch mode {
        case .set, .add, .replace, .compareAndSwap:
            return store(Array(data), expiry: expiry, flags: flags)
        case .append, .prepend, .appendOrCreate, .prependOrCreate:
            let appends = mode == .append || mode == .appendOrCreate
            guard let current else {
                if mode == .appendOrCreate || mode == .prependOrCreate {
                    return lengthOf(store(Array(data), expiry: expiry, flags: flags), data.count)
                }
                return absent()
            }
            let value = appends ? Array(current.value) + Array(data) : Array(data) + Array(current.value)
            return lengthOf(store(value, expiry: current.expiry, flags: current.fields?.flags ?? 0), value.count)
        case .compareAndSwapOrStale:
            guard let current else { return absent() }
            if current.fields?.cas ?? 0 == cas { return store(Array(data), expiry: expiry, flags: flags) }
            // A version older than the item's: stored, but stale, and no longer-lived than the item it replaces
            // (nor than it asks: the earlier of the two expiries, 0 being never).
            let earlier =
                current.expiry == 0 ? expiry : expiry == 0 ? current.expiry : min(expiry, current.expiry)
            let outcome = store(Array(data), expiry: earlier, flags: flags)
            guard case .stored(let unique) = outcome.1 else { return outcome }
            return (outcome.0, .storedStale(cas: unique))
        case .invalidate:
            guard let current else { return absent() }
            let options = CachetItemWrite.InvalidateOptions(rawValue: data.first ?? 0)
            var value = Array(current.value)
            var itemFlags = current.fields?.flags ?? 0
            var itemExpiry = options.contains(.setTTL) ? expiry : current.expiry
            if options.contains(.emptyValue) {
                // memcached's tombstone: an empty value with flags 0 and the given TTL.
                value = []
                itemFlags = 0
                itemExpiry = expiry
            }
            var unique = current.fields?.cas ?? 0
            if options.contains(.stale) || unique == 0 { unique = nextCAS() }
            return (
                .store(value: value, expiry: itemExpiry, fields: CachetItemFields(flags: itemFlags, cas: unique)),
                .stored(cas: unique)
            )
        case .metaGet:
            // Served by metaGet(_:options:ttl:now:diskEntry:) before any decision; options it cannot read:
            return (.keep, .refused(.badRequest, "meta get: 9 bytes of options expected"))
        case .increment, .decrement:
            guard let current else {
                // A miss with an initial value (without one, refused above): the item is created holding it.
                let initial = data.loadUnaligned(fromByteOffset: 8, as: UInt64.self).bigEndian
                let outcome = store(Array(String(initial).utf8), expiry: expiry, flags: flags)
                guard case .stored(let unique) = outcome.1 else { return outcome }
                return (outcome.0, .number(cas: unique, value: initial))
            }
            guard let number = Self.decimal(current.value) else {
                return (.keep, .refused(.badRequest, "cannot increment or decrement non-numeric value"))
            }
            let delta = data.loadUnaligned(as: UInt64.self).bigEndian
            let result = MemcacheTextReply.arithmetic(number, delta: delta, increment: mode == .increment)
            let outcome = store(Array(String(result).utf8), expiry: current.expiry, flags: current.fields?.flags ?? 0)
            guard case .stored(let unique) = outcome.1 else { return outcome }
            return (outcome.0, .number(cas: unique, value: result))
        case .delete:
            return current == nil ? absent() : (.remove, .stored(cas: 0))
        case .touch, .getAndTouch:
            guard let current else { return (.keep, .refused(.notFound, "touch: the key holds no value")) }
            // The value and CAS stay; only the expiry changes (a get-and-touch gives a CAS to an item without).
            let fields =
                current.fields ?? (mode == .getAndTouch ? CachetItemFields(flags: 0, cas: nextCAS()) : nil)
            let value = Array(current.value)
            let reply: ItemReply =
                mode == .touch
                ? .stored(cas: fields?.cas ?? 0)
                : .item(flags: fields?.flags ?? 0, cas: fields?.cas ?? 0, value: value)
            return (.store(value: value, expiry: expiry, fields: fields), reply)
        }
    }

    /// A value read as memcached's `incr` reads it: 1 to 20 decimal digits (trailing spaces allowed) that fit
    /// 64 bits; nil otherwise.
    static func decimal(_ value: UnsafeRawBufferPointer) -> UInt64? {
        var end = value.count
        while end > 0 && value[end - 1] == UInt8(ascii: " ") { end -= 1 }
        guard end > 0, end <= 20 else { return nil }
        var number: UInt64 = 0
        for index in 0..<end {
            let byte = value[index]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (times, overflow) = number.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            guard !overflow, !carry else { return nil }
            number = sum
        }
        return number
    }

    /// A GET with the `item` flag that memory holds: the item, given a CAS unique if it has none, to `found`
    /// under the shard's lock; counts the GET and the hit. Nil on a memory miss (nothing counted).
    func lookUpItem<R>(
        _ key: UnsafeRawBufferPointer,
        now: UInt32,
        _ found: (UnsafeRawBufferPointer, UInt32, CachetItemFields) -> R
    ) -> R? {
        let result = store.withItemGivingCAS(forKey: key, now: now, cas: casSource.next) { value, expiry, fields in
            found(value, expiry, fields)
        }
        if result != nil {
            RequestCounters.bump(counters.gets)
            RequestCounters.bump(counters.hits)
        }
        return result
    }

    /// Keeps an item read from the disk tier in memory with its fields (a CAS unique given when it has
    /// none), as ``promote(_:_:now:)`` does; returns the fields to answer with.
    func promoteItem(_ key: UnsafeRawBufferPointer, _ entry: CachetDiskEntry, now: UInt32) -> CachetItemFields {
        var entry = entry
        let fields = entry.fields ?? CachetItemFields(flags: 0, cas: casSource.next())
        entry.fields = fields
        promote(key, entry, now: now)
        return fields
    }
}

/// A GET with the `item` flag answered from memory without a native request (memcached's `get` and `gets` on
/// a node without users or peers, where a native GET would only come back here). Holds only the four
/// references a read needs: a session takes one per turn, not a copy of ``NodeCommands`` (and its retains)
/// per key.
struct MemoryItemReader {
    let store: CachetMemoryStore
    let diskWorker: CachetDiskWorker?
    let counters: RequestCounters
    let casSource: CachetCASSource

    /// What ``read(_:now:givingCAS:_:)`` came to.
    enum Outcome {
        /// Found, and `found` wrote its reply: to be counted as a GET and a hit.
        case hit
        /// Neither in memory nor, as far as the disk tier says, on disk: to be counted as a GET and a miss.
        case miss
        /// Not answered here: memory missed and the disk tier may hold it, or `found` had no room for the
        /// reply. A native GET is to answer it.
        case elsewhere
    }

    /// Hands the item's value, flags and CAS unique to `found` under the shard's lock; a CAS unique is given
    /// to an item without one only when `givingCAS` (`gets`). Counts nothing: the caller counts its hits and
    /// misses together (``count(hits:misses:)``), not with two atomic additions a key.
    /// - Parameter found: writes the reply; returns false when it has no room.
    @inline(__always)
    func read(
        _ key: UnsafeRawBufferPointer,
        now: UInt32,
        givingCAS: Bool,
        _ found: (UnsafeRawBufferPointer, UInt32, UInt64) -> Bool
    ) -> Outcome {
        let answered: Bool? =
            givingCAS
            ? store.readItemGivingCAS(forKey: key, now: now, cas: casSource.next) { value, fields in
                found(value, fields.flags, fields.cas)
            }
            : store.readItem(forKey: key, now: now) { value, fields in
                found(value, fields?.flags ?? 0, fields?.cas ?? 0)
            }
        switch answered {
        case true?: return .hit
        case false?: return .elsewhere
        case nil:
            if let diskWorker, diskWorker.mayHold(key: key, now: now) { return .elsewhere }
            return .miss
        }
    }

    /// Counts reads answered here: each a GET, and a hit or a miss.
    func count(hits: Int, misses: Int) {
        if hits + misses > 0 { counters.gets.wrappingAdd(hits + misses, ordering: .relaxed) }
        if hits > 0 { counters.hits.wrappingAdd(hits, ordering: .relaxed) }
        if misses > 0 { counters.misses.wrappingAdd(misses, ordering: .relaxed) }
    }
}
