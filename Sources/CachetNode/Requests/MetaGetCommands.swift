import CachetStore
import CachetWire

/// memcached's meta get with its state (``CachetWire/CachetItemWrite/Mode/metaGet``, `Protocol/PROTOCOL.md`,
/// "Items: flags, CAS and conditional writes"): the item, whether it is stale, and who recaches it. Who
/// recaches is the key's lease (``NodeLeases``): a read that finds the item stale, or expiring within the
/// `recache` seconds asked, wins the lease unless another caller holds it; a miss that vivifies stores an
/// empty item and wins it for the empty item's TTL.
extension NodeCommands {
    /// Reads `key`'s item with its state; touches it first when asked; a miss stores the empty item when
    /// asked to vivify.
    /// - Parameter diskEntry: what the disk tier held, read because memory missed (nil otherwise).
    func metaGet(
        _ key: UnsafeRawBufferPointer,
        options: CachetItemWrite.MetaGetOptions,
        ttl: UInt32,
        now: UInt32,
        diskEntry: CachetDiskEntry?,
        newCAS: UInt64? = nil
    ) -> ItemOutcome {
        if options.touch {
            // A get-and-touch (counted as one), answered with the item and its state; whether it was read
            // before is asked first (the touch marks it read, unless `no bump`).
            let hitBefore = store.readState(forKey: key, now: now, marking: false) ?? false
            let touched = writeItem(
                key,
                mode: .getAndTouch,
                flags: 0,
                cas: 0,
                data: UnsafeRawBufferPointer(start: nil, count: 0),
                ttl: ttl,
                now: now,
                diskChecked: true,
                diskEntry: diskEntry,
                markingRead: !options.noBump
            )
            let expiry = Self.expiry(ttl: ttl, now: now)
            if case .answered(.refused(.notFound, _)) = touched {
                return vivify(key, options: options, now: now, newCAS: newCAS)
            }
            return touched.mapReply { reply in
                guard case .item(let flags, let cas, let value) = reply else { return reply }
                var state = metaState(key, cas: cas, expiry: expiry, options: options, now: now)
                if hitBefore { state.insert(.hitBefore) }
                // Written by the touch: accessed now.
                return .metaItem(
                    flags: flags,
                    cas: cas,
                    ttl: Self.ttlLeft(expiry, now: now),
                    state: state,
                    idle: options.idleTime ? 0 : nil,
                    value: value
                )
            }
        }
        var hit = store.withItemForMetaGet(forKey: key, now: now, cas: casSource.next, marking: !options.noBump) {
            value,
            expiry,
            fields,
            read in
            (flags: fields.flags, cas: fields.cas, expiry: expiry, value: Array(value), read: read)
        }
        if hit != nil {
            RequestCounters.bump(counters.gets)
            RequestCounters.bump(counters.hits)
        } else if let entry = diskEntry, !CachetClock.isExpired(entry.expiry, now: now) {
            RequestCounters.bump(counters.gets)
            let fields = promoteItem(key, entry, now: now)
            // Kept in memory from the disk tier: whether it was read before there is not known.
            if !options.noBump { _ = store.readState(forKey: key, now: now, marking: true) }
            hit = (
                fields.flags, fields.cas, entry.expiry, entry.value, CachetMetaRead(hitBefore: false, idleSeconds: 0)
            )
        }
        guard let hit else {
            RequestCounters.bump(counters.gets)
            RequestCounters.bump(counters.misses)
            return vivify(key, options: options, now: now, newCAS: newCAS)
        }
        var state = metaState(key, cas: hit.cas, expiry: hit.expiry, options: options, now: now)
        if hit.read.hitBefore { state.insert(.hitBefore) }
        return .answered(
            .metaItem(
                flags: hit.flags,
                cas: hit.cas,
                ttl: Self.ttlLeft(hit.expiry, now: now),
                state: state,
                idle: options.idleTime ? hit.read.idleSeconds : nil,
                value: hit.value
            )
        )
    }

    /// A hit's state: stale when marked so for its CAS unique; the lease won when it is stale or expires
    /// within `recache` seconds and nobody else holds it; held when somebody else does.
    private func metaState(
        _ key: UnsafeRawBufferPointer,
        cas: UInt64,
        expiry: UInt32,
        options: CachetItemWrite.MetaGetOptions,
        now: UInt32
    ) -> CachetItemWrite.MetaState {
        var state: CachetItemWrite.MetaState = leases.isStale(key, cas: cas) ? .stale : []
        let expiresSoon = options.recache > 0 && expiry != 0 && expiry &- now < options.recache
        if state.contains(.stale) || expiresSoon {
            state.insert(leases.acquire(key) == .held ? .held : .won)
        } else if leases.isHeld(key) {
            state.insert(.held)
        }
        return state
    }

    /// A miss: NOT_FOUND, or, when asked to vivify, the empty item stored with the vivify TTL and the
    /// key's lease won for as long (held when another caller vivified it first).
    private func vivify(
        _ key: UnsafeRawBufferPointer,
        options: CachetItemWrite.MetaGetOptions,
        now: UInt32,
        newCAS: UInt64?
    ) -> ItemOutcome {
        guard options.vivify else { return .answered(.refused(.notFound, "meta get: the key holds no value")) }
        func idle(_ seconds: UInt32) -> UInt32? { options.idleTime ? seconds : nil }
        let ttl = Self.ttlLeft(Self.expiry(ttl: options.vivifyTTL, now: now), now: now)
        // The lease first: a caller that finds the empty item then finds it held.
        let grant = leases.acquire(key, seconds: options.vivifyTTL == 0 ? nil : options.vivifyTTL)
        switch grant {
        case .held:
            return .answered(.metaItem(flags: 0, cas: 0, ttl: ttl, state: .held, idle: idle(0), value: []))
        case .none:
            // Too many leases outstanding: no empty item either (others would read it as a value); this
            // caller loads by itself.
            return .answered(.metaItem(flags: 0, cas: 0, ttl: ttl, state: .won, idle: idle(0), value: []))
        case .granted:
            break
        }
        let stub = writeItem(
            key,
            mode: .add,
            flags: 0,
            cas: 0,
            data: UnsafeRawBufferPointer(start: nil, count: 0),
            ttl: options.vivifyTTL,
            now: now,
            diskChecked: true,
            keepingLease: true,
            newCAS: newCAS
        )
        if case .answered(.refused(.notStored, _)) = stub {
            // A value stored since the miss: the lease is given up, and the read answered with that value.
            leases.invalidate(key)
            var reading = options
            reading.vivify = false
            reading.touch = false
            return metaGet(key, options: reading, ttl: 0, now: now, diskEntry: nil)
        }
        return stub.mapReply { reply in
            guard case .stored(let cas) = reply else { return reply }
            return .metaItem(flags: 0, cas: cas, ttl: ttl, state: .won, idle: idle(0), value: [])
        }
    }

    /// The seconds an entry expiring at `expiry` has left (0: it never expires).
    static func ttlLeft(_ expiry: UInt32, now: UInt32) -> UInt32 {
        expiry == 0 ? 0 : max(1, expiry &- now)
    }
}

extension ItemOutcome {
    /// The same outcome with its reply changed by `transform` (answered now or once queued).
    func mapReply(_ transform: (ItemReply) -> ItemReply) -> ItemOutcome {
        switch self {
        case .answered(let reply):
            return .answered(transform(reply))
        case .waitingForDisk(let write):
            return .waitingForDisk(write.replacing(reply: transform(write.reply)))
        case .readDiskFirst, .failed:
            return self
        }
    }
}
