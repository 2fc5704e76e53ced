import CachetIO
import CachetMemcache
import CachetWire

/// memcached's meta commands (`mg`, `ms`, `md`, `ma`, `mn`, `me`; `docs/memcached.md`, "The meta protocol")
/// turned into the node's own requests, as ``MemcacheSession`` turns the text commands, and their replies
/// into the meta protocol's lines: `VA`, `HD`, `EN`, `NS`, `EX`, `NF`, `MN`, `ME`, with the flags each
/// command asked to have returned, in the order it sent them.
///
/// - `mg`: an item read with its state (``CachetWire/CachetItemWrite/Mode/metaGet``) on the key's owner,
///   touching the item first for `T`. Who recaches a key is the node's lease: a read that finds the item
///   stale (`X`), or expiring within `R`'s seconds, wins it (`W`) unless another caller holds it (`Z`), and
///   `N` (vivify on miss) stores an empty item and wins the lease for `N`'s TTL. A lease won by `X` or `R`
///   lasts `--lease-time`: a winner that never stores does not keep the others waiting longer.
/// - `ms`: an item write: `MS` set, `ME` add, `MR` replace, `MA` append, `MP` prepend, `C` compare and swap
///   (with `I`, an older CAS unique stores all the same and leaves the item stale), `N` an append that
///   creates a missing item.
/// - `md`: a DEL; with `I` (stale, a new CAS unique, `T` its TTL) or `x` (the value emptied), an
///   invalidation that keeps the item. `ma`: an `incr` or `decr` item write, then a touch for `T`.
/// - `me`: the item's expiry, last access, CAS unique, whether it was read, and size (`exp`, `la`, `cas`,
///   `fetch`, `size`; a read that marks nothing; `cls`, memcached's slab class, has no counterpart).
///
/// `mg h` returns whether the item had been read since it was stored (a mark in the entry's header, which
/// every read sets); `mg l` the seconds since it was last read or written (kept in the entry's link words,
/// moved at most once a minute, as memcached's); `mg u` reads without marking the item, for the LRU, as hit
/// or as accessed. `E` gives the item the client's CAS unique wherever a write changes it.
enum MemcacheMeta {
    /// What a meta command's reply needs from its command.
    struct Reply {
        let kind: MemcacheMetaCommand.Kind
        /// The key as sent (its base64 form with `b`), for `k` and `me`.
        let key: [UInt8]
        /// The flags to return, in order: their letter and, for `O`, its token.
        let returns: [(letter: UInt8, token: [UInt8])]
        /// `q`: the nominal reply (`HD`; `EN` for `mg`) is not sent.
        let quiet: Bool
        /// `v` (`mg`, `ma`): the value is sent (`VA`).
        let value: Bool
        /// `mg C`: the value is not sent when the item's CAS unique is this.
        let unlessCAS: UInt64?
        /// `mg T`: the TTL the item was given, for `t` (its reply carries none).
        let touchedTTL: Int64?
        /// `b`: the key is sent in base64, and `k` returns it so, followed by `b`.
        let binary: Bool
        /// Whether the item's reply carries its TTL (`mg t` without `T`, `me`).
        let carriesTTL: Bool
        /// `ms`: the data's length, for `s`.
        let storedLength: Int
        /// `ms` whose expiry is past: the native request is a DEL, and the answer is `HD`.
        let deletesExpired: Bool
        /// `mg` read with its state (``CachetWire/CachetItemWrite/Mode/metaGet``): the reply carries the TTL
        /// left and the state byte after the CAS unique.
        let withState: Bool
        /// `mg l`: the reply carries the seconds since the item was last accessed after the state byte.
        let withIdleTime: Bool
    }

    // MARK: Commands in

    /// Turns `meta` into native requests on `session`, or into the error line it is answered with.
    static func translate(
        _ meta: MemcacheMetaCommand,
        in buffer: UnsafeRawBufferPointer,
        now: UInt32,
        session: MemcacheSession
    ) {
        func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buffer[range]) }
        func number(_ letter: Character) -> Int64? {
            meta.flag(letter).flatMap { Int64(String(decoding: bytes($0.token), as: UTF8.self)) }
        }
        func unsigned(_ letter: Character) -> UInt64? {
            meta.flag(letter).flatMap { UInt64(String(decoding: bytes($0.token), as: UTF8.self)) }
        }
        func refuse(_ message: String) {
            session.appendLocal(Array("CLIENT_ERROR \(message)\r\n".utf8), quiet: false)
        }
        if meta.kind == .noop { return session.appendLocal(Array("MN\r\n".utf8), quiet: false) }
        // The key's bytes: base64-decoded with `b`.
        let key: [UInt8]
        if meta.has("b") {
            guard let decoded = CachetBase64.decode(bytes(meta.key)),
                (1...MemcacheTextDecoder.maximumKeyLength).contains(decoded.count)
            else {
                return refuse("error decoding key")
            }
            key = decoded
        } else {
            key = Array(bytes(meta.key))
        }
        var returns: [(letter: UInt8, token: [UInt8])] = []
        for flag in meta.flags where "ckfsthlO".utf8.contains(flag.letter) {
            returns.append((flag.letter, flag.letter == UInt8(ascii: "O") ? Array(bytes(flag.token)) : []))
        }
        let ttl = number("T")
        func reply(
            value: Bool = false,
            unlessCAS: UInt64? = nil,
            touchedTTL: Int64? = nil,
            carriesTTL: Bool = false,
            storedLength: Int = 0,
            deletesExpired: Bool = false,
            withState: Bool = false
        ) -> MemcacheSession.Reply {
            let withIdleTime = withState && (meta.has("l") || meta.kind == .debug)
            return .meta(
                Reply(
                    kind: meta.kind,
                    key: Array(bytes(meta.key)),
                    returns: returns,
                    quiet: meta.has("q"),
                    value: value,
                    unlessCAS: unlessCAS,
                    touchedTTL: touchedTTL,
                    binary: meta.has("b"),
                    carriesTTL: carriesTTL,
                    storedLength: storedLength,
                    deletesExpired: deletesExpired,
                    withState: withState,
                    withIdleTime: withIdleTime
                )
            )
        }
        key.withUnsafeBytes { key in
            switch meta.kind {
            case .get:
                if let ttl, MemcacheSession.ttl(ttl, now: now) == nil {
                    // Touched into the past: answered with the item, which is gone after (as memcached does).
                    session.appendKeyed(.get, key, flags: .item)
                    session.push(reply(value: meta.has("v"), unlessCAS: unsigned("C"), touchedTTL: -1), quiet: false)
                    session.appendKeyed(.delete, key)
                    return session.push(.discard, quiet: true)
                }
                // Read with its state on the key's owner: stale (`X`), the recache won (`W`) or held (`Z`).
                var options = CachetItemWrite.MetaGetOptions()
                var touch: UInt32 = 0
                if let ttl, let seconds = MemcacheSession.ttl(ttl, now: now) {
                    options.touch = true
                    touch = seconds
                }
                if let vivify = number("N") {
                    options.vivify = true
                    options.vivifyTTL = MemcacheSession.ttl(vivify, now: now) ?? 1
                }
                if let recache = number("R") { options.recache = UInt32(clamping: max(0, recache)) }
                options.noBump = meta.has("u")
                options.idleTime = meta.has("l")
                options.encoded.withUnsafeBytes {
                    session.appendItemWrite(.metaGet, key: key, data: $0, ttl: touch, newCAS: unsigned("E"))
                }
                session.push(
                    reply(value: meta.has("v"), unlessCAS: unsigned("C"), touchedTTL: ttl, withState: true),
                    quiet: false
                )
            case .set:
                let data = meta.data.map(bytes) ?? UnsafeRawBufferPointer(start: nil, count: 0)
                let mode: CachetItemWrite.Mode
                // `N` makes an append or prepend create a missing item, with N's TTL rather than T's.
                let vivify = number("N")
                var itemTTL = ttl ?? 0
                switch meta.flag("M").map({ buffer[$0.token.lowerBound] }) ?? UInt8(ascii: "S") {
                case UInt8(ascii: "S"), UInt8(ascii: "s"):
                    // `I` with `C`: an older CAS unique stores all the same, and leaves the item stale.
                    mode = meta.has("C") ? (meta.has("I") ? .compareAndSwapOrStale : .compareAndSwap) : .set
                case UInt8(ascii: "E"), UInt8(ascii: "e"): mode = .add
                case UInt8(ascii: "R"), UInt8(ascii: "r"): mode = .replace
                case UInt8(ascii: "A"), UInt8(ascii: "a"): mode = vivify == nil ? .append : .appendOrCreate
                case UInt8(ascii: "P"), UInt8(ascii: "p"): mode = vivify == nil ? .prepend : .prependOrCreate
                default: return refuse("invalid mode for ms STORE")
                }
                if let vivify, mode == .appendOrCreate || mode == .prependOrCreate { itemTTL = vivify }
                if meta.has("C") && (mode == .add || mode == .replace) {
                    return refuse("flag C is supported with modes S, A and P only by this server")
                }
                guard let seconds = MemcacheSession.ttl(itemTTL, now: now) else {
                    session.appendKeyed(.delete, key)
                    return session.push(reply(storedLength: data.count, deletesExpired: true), quiet: false)
                }
                session.appendItemWrite(
                    mode,
                    key: key,
                    flags: UInt32(truncatingIfNeeded: unsigned("F") ?? 0),
                    cas: unsigned("C") ?? 0,
                    data: data,
                    ttl: seconds,
                    newCAS: unsigned("E")
                )
                session.push(reply(storedLength: data.count), quiet: false)
            case .delete where meta.has("I") || meta.has("x"):
                // Kept, changed: marked stale with a new CAS unique (`I`, its TTL set by `T`), emptied (`x`).
                var options: CachetItemWrite.InvalidateOptions = []
                if meta.has("I") { options.insert(.stale) }
                if meta.has("x") { options.insert(.emptyValue) }
                var seconds: UInt32 = 0
                if let ttl {
                    guard let left = MemcacheSession.ttl(ttl, now: now) else {
                        // A TTL in the past: the item expires at once, as a delete.
                        session.appendKeyed(.delete, key)
                        return session.push(reply(), quiet: false)
                    }
                    if options.contains(.stale) { options.insert(.setTTL) }
                    seconds = left
                }
                withUnsafeBytes(of: options.rawValue) {
                    session.appendItemWrite(
                        .invalidate,
                        key: key,
                        cas: unsigned("C") ?? 0,
                        data: $0,
                        ttl: seconds,
                        newCAS: unsigned("E")
                    )
                }
                session.push(reply(), quiet: false)
            case .delete:
                if let cas = unsigned("C") {
                    // Removed only if its CAS unique is still this one, in one step on the key's owner.
                    session.appendItemWrite(.delete, key: key, cas: cas)
                } else {
                    session.appendKeyed(.delete, key)
                }
                session.push(reply(), quiet: false)
            case .arithmetic:
                let increment: Bool
                switch meta.flag("M").map({ buffer[$0.token.lowerBound] }) ?? UInt8(ascii: "I") {
                case UInt8(ascii: "I"), UInt8(ascii: "i"), UInt8(ascii: "+"): increment = true
                case UInt8(ascii: "D"), UInt8(ascii: "d"), UInt8(ascii: "-"): increment = false
                default: return refuse("invalid mode for ma")
                }
                guard meta.flag("D").map({ UInt64(String(decoding: bytes($0.token), as: UTF8.self)) != nil }) ?? true
                else { return refuse("invalid numeric delta argument") }
                // With N, a miss creates the counter holding J (0 by default) for N's TTL.
                let created = number("N").map { MemcacheSession.ttl($0, now: now) ?? 0 }
                let delta = (unsigned("D") ?? 1).bigEndian
                let initial = (unsigned("J") ?? 0).bigEndian
                let mode: CachetItemWrite.Mode = increment ? .increment : .decrement
                let cas = unsigned("C") ?? 0
                if let created {
                    withUnsafeBytes(of: (delta, initial)) {
                        session.appendItemWrite(mode, key: key, cas: cas, data: $0, ttl: created, newCAS: unsigned("E"))
                    }
                } else {
                    withUnsafeBytes(of: delta) {
                        session.appendItemWrite(mode, key: key, cas: cas, data: $0, newCAS: unsigned("E"))
                    }
                }
                // `t` without `T`: the TTL is read right after (a GET with the `ttl` flag) and the line written then.
                let readsTTL = meta.has("t") && ttl == nil
                session.push(reply(value: meta.has("v"), touchedTTL: ttl, carriesTTL: readsTTL), quiet: false)
                if readsTTL {
                    session.appendKeyed(.get, key, flags: [.item, .ttl])
                    session.push(.metaTTL, quiet: false)
                }
                if let ttl {
                    // memcached sets the TTL with the arithmetic; here a touch right after it, in order.
                    if let seconds = MemcacheSession.ttl(ttl, now: now) {
                        session.appendItemWrite(.touch, key: key, ttl: seconds)
                    } else {
                        session.appendKeyed(.delete, key)
                    }
                    session.push(.discard, quiet: false)
                }
            case .debug:
                // A meta get that marks nothing and asks for the idle time: `la` and `fetch` beside `exp`.
                CachetItemWrite.MetaGetOptions(noBump: true, idleTime: true).encoded.withUnsafeBytes {
                    session.appendItemWrite(.metaGet, key: key, data: $0, ttl: 0)
                }
                session.push(reply(withState: true), quiet: false)
            case .noop:
                break
            }
        }
    }

    // MARK: Replies out

    /// Appends the line of an `ma` that succeeded.
    private static func appendArithmetic(
        _ reply: Reply,
        cas: UInt64,
        number: UInt64,
        ttl: Int64?,
        to text: inout CachetByteBuffer
    ) {
        let digits = MemcacheTextReply.number(number)
        if reply.value {
            // `digits` ends with its line end.
            line("VA \(digits.count - 2)", reply, cas: cas, ttl: ttl, to: &text)
            text.append(digits)
        } else if !reply.quiet {
            line("HD", reply, cas: cas, ttl: ttl, to: &text)
        }
    }

    /// The reply to the GET that reads an `ma`'s TTL: the `ma`'s line, held until now, with it.
    static func appendHeldArithmetic(
        status: CachetStatus,
        body: UnsafeRawBufferPointer,
        session: MemcacheSession,
        to text: inout CachetByteBuffer
    ) {
        guard let (reply, cas, number) = session.heldArithmetic else { return }
        session.heldArithmetic = nil
        var ttl: Int64 = -1
        if status == .ok, body.count >= CachetItemWrite.itemReplyPrefixSize + 4 {
            let left = body.loadUnaligned(fromByteOffset: CachetItemWrite.itemReplyPrefixSize, as: UInt32.self)
                .bigEndian
            ttl = left == 0 ? -1 : Int64(left)
        }
        appendArithmetic(reply, cas: cas, number: number, ttl: ttl, to: &text)
    }

    /// Appends the meta reply to one native reply.
    static func append(
        _ reply: Reply,
        status: CachetStatus,
        body: UnsafeRawBufferPointer,
        session: MemcacheSession,
        to text: inout CachetByteBuffer
    ) {
        switch reply.kind {
        case .get, .debug:
            appendGet(reply, status: status, body: body, to: &text)
        case .set where reply.deletesExpired:
            if status == .ok || status == .notFound {
                if !reply.quiet { line("HD", reply, to: &text) }
            } else {
                text.append(MemcacheReplies.errorLine(status, body))
            }
        case .set:
            switch status {
            case .ok:
                let cas = body.count >= 8 ? body.loadUnaligned(as: UInt64.self).bigEndian : 0
                // An append's reply carries the value's new length.
                let size =
                    body.count >= 16
                    ? Int(body.loadUnaligned(fromByteOffset: 8, as: UInt64.self).bigEndian) : reply.storedLength
                if !reply.quiet { line("HD", reply, cas: cas, size: size, to: &text) }
            // memcached returns the flags on a refusal too, `c` as 0.
            case .notStored: line("NS", reply, cas: 0, to: &text)
            case .exists: line("EX", reply, cas: 0, to: &text)
            case .notFound: line("NF", reply, cas: 0, to: &text)
            default: text.append(MemcacheReplies.errorLine(status, body))
            }
        case .delete:
            switch status {
            case .ok: if !reply.quiet { line("HD", reply, to: &text) }
            case .notFound: line("NF", reply, to: &text)
            case .exists: line("EX", reply, to: &text)
            default: text.append(MemcacheReplies.errorLine(status, body))
            }
        case .arithmetic:
            switch status {
            case .ok where body.count >= 16:
                let cas = body.loadUnaligned(as: UInt64.self).bigEndian
                let number = body.loadUnaligned(fromByteOffset: 8, as: UInt64.self).bigEndian
                guard !reply.carriesTTL else {
                    // Written once the TTL read after it is answered.
                    session.heldArithmetic = (reply, cas, number)
                    return
                }
                appendArithmetic(reply, cas: cas, number: number, ttl: reply.touchedTTL, to: &text)
            case .notFound: line("NF", reply, to: &text)
            case .exists: line("EX", reply, to: &text)
            case .badRequest:
                text.append(Array("CLIENT_ERROR cannot increment or decrement non-numeric value\r\n".utf8))
            default: text.append(MemcacheReplies.errorLine(status, body))
            }
        case .noop:
            break
        }
    }

    private static func appendGet(
        _ reply: Reply,
        status: CachetStatus,
        body: UnsafeRawBufferPointer,
        to text: inout CachetByteBuffer
    ) {
        let prefix =
            reply.withState
            ? CachetItemWrite.metaItemReplyPrefixSize + (reply.withIdleTime ? 4 : 0)
            : CachetItemWrite.itemReplyPrefixSize + (reply.carriesTTL ? 4 : 0)
        guard status == .ok, body.count >= prefix else {
            guard status == .notFound || (status == .ok && reply.touchedTTL != nil) else {
                return text.append(MemcacheReplies.errorLine(status, body))
            }
            if !reply.quiet { line("EN", reply, missing: true, to: &text) }
            return
        }
        let flags = body.loadUnaligned(as: UInt32.self).bigEndian
        let cas = body.loadUnaligned(fromByteOffset: 4, as: UInt64.self).bigEndian
        var ttl: Int64 = reply.touchedTTL ?? -1
        if reply.carriesTTL || reply.withState {
            let left = body.loadUnaligned(fromByteOffset: 12, as: UInt32.self).bigEndian
            ttl = left == 0 ? -1 : Int64(left)
        }
        // memcached's order: `Z` (another caller recaches), `X` (stale), `W` (this caller recaches).
        var suffix = ""
        var hitBefore: Bool?
        var idle: UInt32?
        if reply.withState {
            let state = CachetItemWrite.MetaState(rawValue: body[16])
            hitBefore = state.contains(.hitBefore)
            if reply.withIdleTime { idle = body.loadUnaligned(fromByteOffset: 17, as: UInt32.self).bigEndian }
            let words = [(CachetItemWrite.MetaState.held, "Z"), (.stale, "X"), (.won, "W")]
            suffix = words.filter { state.contains($0.0) }.map(\.1).joined(separator: " ")
        }
        let data = UnsafeRawBufferPointer(rebasing: body[prefix...])
        if reply.kind == .debug {
            let key = String(decoding: reply.key, as: UTF8.self)
            let fetched = hitBefore == true ? "yes" : "no"
            return text.append(
                Array("ME \(key) exp=\(ttl) la=\(idle ?? 0) cas=\(cas) fetch=\(fetched) size=\(data.count)\r\n".utf8)
            )
        }
        let sendsValue = reply.value && reply.unlessCAS != cas
        line(
            sendsValue ? "VA \(data.count)" : "HD",
            reply,
            cas: cas,
            flags: flags,
            size: data.count,
            ttl: ttl,
            hitBefore: hitBefore,
            idle: idle,
            suffix: suffix,
            to: &text
        )
        if sendsValue {
            text.append(data)
            text.append([13, 10])
        }
    }

    /// A reply line: `code`, then the flags the command asked to have returned, in its order.
    private static func line(
        _ code: String,
        _ reply: Reply,
        cas: UInt64? = nil,
        flags: UInt32? = nil,
        size: Int? = nil,
        ttl: Int64? = nil,
        hitBefore: Bool? = nil,
        idle: UInt32? = nil,
        missing: Bool = false,
        suffix: String = "",
        to text: inout CachetByteBuffer
    ) {
        var line = Array(code.utf8)
        for (letter, token) in reply.returns {
            switch letter {
            case UInt8(ascii: "O"):
                line += [0x20, letter] + token
            case UInt8(ascii: "k"):
                line += [0x20, letter] + reply.key
                if reply.binary { line += [0x20, UInt8(ascii: "b")] }
            case UInt8(ascii: "c") where !missing:
                if let cas { line += Array(" c\(cas)".utf8) }
            case UInt8(ascii: "f") where !missing:
                if let flags { line += Array(" f\(flags)".utf8) }
            case UInt8(ascii: "s") where !missing:
                if let size { line += Array(" s\(size)".utf8) }
            case UInt8(ascii: "t") where !missing:
                if let ttl { line += Array(" t\(ttl)".utf8) }
            case UInt8(ascii: "h") where !missing:
                if let hitBefore { line += Array(" h\(hitBefore ? 1 : 0)".utf8) }
            case UInt8(ascii: "l") where !missing:
                if let idle { line += Array(" l\(idle)".utf8) }
            default:
                break
            }
        }
        if !suffix.isEmpty { line += Array(" \(suffix)".utf8) }
        line += [13, 10]
        text.append(line)
    }
}
