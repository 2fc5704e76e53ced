#if canImport(Glibc)
import Glibc
#endif

/// memcached's text protocol (memcached's `protocol.txt`, "Commands"): a command line decoded in place,
/// without I/O, into what it asks for; what the node's memcached port reads its commands with
/// (`docs/memcached.md`). Offsets are into the caller's buffer, as ``CachetWire``'s decoders give them.
///
/// What memcached 1.6 does is followed where clients can tell: lines end with `\n` (a `\r` before it is
/// dropped); tokens are separated by one or more spaces; a key is 1 to 250 bytes with no control
/// characters; a bad line is answered `CLIENT_ERROR bad command line format` and an unknown command `ERROR`,
/// both on an open connection, and no reply at all for a command with `noreply`; a line without its end past
/// 2048 bytes (other than a `get` or `gets`, whose keys may run to ``maximumRetrievalLineLength``) closes the
/// connection without a reply; a storage command's data block must end with `\r\n` (`CLIENT_ERROR bad data
/// chunk`, the block consumed), and one over the limit is refused at once and discarded as it arrives.
public enum MemcacheTextDecoder {
    /// The longest key memcached takes.
    public static let maximumKeyLength = 250
    /// The longest line of any command but `get` and `gets`.
    public static let maximumLineLength = 2048
    /// The longest `get` or `gets` line (many keys).
    public static let maximumRetrievalLineLength = 1 << 20

    /// Decodes the command at `offset` of `buffer`.
    /// - Parameters:
    ///   - buffer: received bytes.
    ///   - offset: where the command starts.
    ///   - maximumValueLength: a storage command announcing more bytes is answered `SERVER_ERROR object too
    ///     large for cache`, its data block consumed.
    public static func decode(
        _ buffer: UnsafeRawBufferPointer,
        at offset: Int = 0,
        maximumValueLength: Int = 1 << 20
    ) -> MemcacheTextDecoding {
        guard let newline = firstNewline(in: buffer, from: offset) else {
            let pending = buffer.count - offset
            let limit = startsRetrieval(buffer, at: offset) ? maximumRetrievalLineLength : maximumLineLength
            return pending > limit ? .failure(.lineTooLong, end: buffer.count) : .needMore
        }
        let lineEnd = newline > offset && buffer[newline - 1] == UInt8(ascii: "\r") ? newline - 1 : newline
        let end = newline + 1
        switch scanGet(buffer, from: offset, lineEnd: lineEnd) {
        case .keys(let keys, let withCAS):
            return .command(.retrieve(keys: keys, withCAS: withCAS, touch: nil), end: end)
        case .badKeys:
            return .failure(.badFormat, end: end)
        case .otherLine:
            break
        }
        // The verb, then the arguments in one array (one allocation a command, none for a bare verb).
        var verb: Range<Int>?
        var arguments: [Range<Int>] = []
        // One allocation for the usual commands (a storage line has 4 to 6 tokens), not one per doubling.
        arguments.reserveCapacity(8)
        var position = offset
        let bytes = buffer.baseAddress.unsafelyUnwrapped
        while position < lineEnd {
            while position < lineEnd && bytes.load(fromByteOffset: position, as: UInt8.self) == 0x20 { position += 1 }
            let start = position
            while position < lineEnd && bytes.load(fromByteOffset: position, as: UInt8.self) != 0x20 { position += 1 }
            guard position > start else { continue }
            if verb == nil {
                verb = start..<position
            } else {
                arguments.append(start..<position)
            }
        }
        // A blank line is a bad line (memcached 1.6.4x; it was ERROR before).
        guard let verb else { return .failure(.badFormat, end: end) }
        guard let name = Verb(UnsafeRawBufferPointer(rebasing: buffer[verb])) else {
            // An HTTP request sent to the port (`GET / HTTP/1.1`): closed without a reply, as memcached closes
            // it, so that a browser tricked into posting to the cache gets nothing back.
            if let last = arguments.last, last.count >= 5,
                UnsafeRawBufferPointer(rebasing: buffer[last.lowerBound..<(last.lowerBound + 5)])
                    .elementsEqual("HTTP/".utf8)
            {
                return .failure(.httpRequest, end: end)
            }
            return .failure(.unknownCommand, end: end)
        }
        func text(_ range: Range<Int>) -> String {
            String(decoding: UnsafeRawBufferPointer(rebasing: buffer[range]), as: UTF8.self)
        }
        func number<Number: FixedWidthInteger>(_ range: Range<Int>, as type: Number.Type = Number.self) -> Number? {
            parseInteger(range, in: buffer)
        }
        let noreply = arguments.last.map { isNoreply($0, in: buffer) } ?? false
        switch name {
        case .get, .gets, .gat, .gats:
            let touches = name == .gat || name == .gats
            let keys = touches ? Array(arguments.dropFirst()) : arguments
            guard !keys.isEmpty, keys.allSatisfy({ isKey($0, in: buffer) }) else {
                return .failure(.badFormat, end: end)
            }
            var exptime: Int64?
            if touches {
                guard let first = arguments.first, let value: Int64 = number(first) else {
                    return .failure(.badFormat, end: end)
                }
                exptime = value
            }
            let span = keys[0].lowerBound..<keys[keys.count - 1].upperBound
            return .command(
                .retrieve(
                    keys: MemcacheKeyList(span: span, count: keys.count),
                    withCAS: name == .gets || name == .gats,
                    touch: exptime
                ),
                end: end
            )
        case .set, .add, .replace, .append, .prepend, .cas:
            let verb = name.storage.unsafelyUnwrapped
            let required = verb == .cas ? 5 : 4
            let count = arguments.count - (noreply ? 1 : 0)
            // memcached ignores one token more (where `noreply` would be).
            guard count >= required - 1, count <= required + 1, arguments.count > 3,
                let length: Int = number(arguments[3]),
                (0...(Int(Int32.max) - 2)).contains(length)
            else { return .failure(.badFormat, end: end, noreply: noreply) }
            // With a length it can read, memcached refuses the other fields after it and swallows the data
            // block (which would otherwise be read as a command).
            let swallowed = end + length + 2
            guard count >= required, isKey(arguments[0], in: buffer), let flags: UInt32 = number(arguments[1]),
                let exptime: Int64 = number(arguments[2])
            else { return .failure(.badFormat, end: swallowed, noreply: noreply) }
            var cas: UInt64?
            if verb == .cas {
                guard let unique: UInt64 = number(arguments[4]) else {
                    return .failure(.badFormat, end: swallowed, noreply: noreply)
                }
                cas = unique
            }
            guard length <= maximumValueLength else {
                // Refused at once; its data block is discarded as it arrives (`end` may lie past the bytes
                // received), as memcached swallows it. A `set` also takes the key's older value away, as
                // memcached unlinks it, so that no older value stays readable.
                return .failure(
                    .tooLarge(replacing: verb == .set ? arguments[0] : nil),
                    end: end + length + 2,
                    noreply: noreply
                )
            }
            guard buffer.count >= end + length + 2 else { return .needMore }
            let data = end..<(end + length)
            guard buffer[end + length] == UInt8(ascii: "\r"), buffer[end + length + 1] == UInt8(ascii: "\n") else {
                return .failure(.badDataChunk, end: end + length + 2, noreply: noreply)
            }
            return .command(
                .store(verb, key: arguments[0], flags: flags, exptime: exptime, data: data, cas: cas, noreply: noreply),
                end: end + length + 2
            )
        case .delete:
            let count = arguments.count - (noreply ? 1 : 0)
            // memcached still takes a time of 0 after the key, from an older form of the command.
            guard count == 1 || (count == 2 && text(arguments[1]) == "0"), isKey(arguments[0], in: buffer) else {
                return .failure(.badDeleteFormat, end: end, noreply: noreply)
            }
            return .command(.delete(key: arguments[0], noreply: noreply), end: end)
        case .incr, .decr:
            let count = arguments.count - (noreply ? 1 : 0)
            guard count == 2, isKey(arguments[0], in: buffer) else {
                return .failure(.badFormat, end: end, noreply: noreply)
            }
            guard let delta: UInt64 = number(arguments[1]) else {
                return .failure(.invalidDelta, end: end, noreply: noreply)
            }
            return .command(
                .arithmetic(increment: name == .incr, key: arguments[0], delta: delta, noreply: noreply),
                end: end
            )
        case .touch:
            let count = arguments.count - (noreply ? 1 : 0)
            guard count == 2, isKey(arguments[0], in: buffer), let exptime: Int64 = number(arguments[1]) else {
                return .failure(.badFormat, end: end, noreply: noreply)
            }
            return .command(.touch(key: arguments[0], exptime: exptime, noreply: noreply), end: end)
        case .flushAll:
            let count = arguments.count - (noreply ? 1 : 0)
            guard count <= 1 else { return .failure(.badFormat, end: end, noreply: noreply) }
            var delay: Int64 = 0
            if count == 1 {
                guard let value: Int64 = number(arguments[0]), value >= 0 else {
                    return .failure(.invalidExptime, end: end, noreply: noreply)
                }
                delay = value
            }
            return .command(.flushAll(delay: delay, noreply: noreply), end: end)
        case .cacheMemlimit:
            let count = arguments.count - (noreply ? 1 : 0)
            guard count == 1, let megabytes: UInt64 = number(arguments[0]), megabytes > 0, megabytes < 1 << 40 else {
                return .failure(.badFormat, end: end, noreply: noreply)
            }
            return .command(.cacheMemoryLimit(megabytes: megabytes, noreply: noreply), end: end)
        case .version:
            // memcached 1.6 ignores words after version and quit.
            return .command(.version, end: end)
        case .verbosity:
            // memcached takes one or two words (a level, then noreply) and does not check the level.
            guard (1...2).contains(arguments.count) else { return .failure(.unknownCommand, end: end) }
            return .command(.verbosity(noreply: noreply), end: end)
        case .stats:
            // The groups memcached reports beside the general one; any other is an unknown command.
            if let group = arguments.first,
                !["settings", "items", "slabs", "sizes", "conns", "cachedump", "detail"].contains(text(group))
            {
                return .failure(.unknownCommand, end: end)
            }
            return .command(.stats(argument: arguments.first), end: end)
        case .quit:
            return .command(.quit, end: end)
        case .metaGet, .metaSet, .metaDelete, .metaArithmetic, .metaNoop, .metaDebug:
            let kinds: [Verb: MemcacheMetaCommand.Kind] = [
                .metaGet: .get, .metaSet: .set, .metaDelete: .delete, .metaArithmetic: .arithmetic,
                .metaNoop: .noop, .metaDebug: .debug,
            ]
            return decodeMeta(
                kinds[name].unsafelyUnwrapped,
                arguments: arguments,
                in: buffer,
                end: end,
                maximumValueLength: maximumValueLength
            )
        }
    }

    /// A command's verb, told from its bytes without making a string.
    enum Verb {
        case get, gets, gat, gats, set, add, replace, append, prepend, cas, delete, incr, decr, touch
        case flushAll, cacheMemlimit, version, verbosity, stats, quit
        case metaGet, metaSet, metaDelete, metaArithmetic, metaNoop, metaDebug

        private static let spelled: [(Verb, String)] = [
            (.get, "get"), (.gets, "gets"), (.gat, "gat"), (.gats, "gats"), (.set, "set"), (.add, "add"),
            (.replace, "replace"), (.append, "append"), (.prepend, "prepend"), (.cas, "cas"), (.delete, "delete"),
            (.incr, "incr"), (.decr, "decr"), (.touch, "touch"), (.flushAll, "flush_all"),
            (.cacheMemlimit, "cache_memlimit"), (.version, "version"), (.verbosity, "verbosity"), (.stats, "stats"),
            (.quit, "quit"), (.metaGet, "mg"), (.metaSet, "ms"), (.metaDelete, "md"), (.metaArithmetic, "ma"),
            (.metaNoop, "mn"), (.metaDebug, "me"),
        ]
        private static let names: [(Verb, [UInt8])] = spelled.map { ($0.0, Array($0.1.utf8)) }

        /// The verb these bytes spell, or nil for none memcached has.
        init?(_ bytes: UnsafeRawBufferPointer) {
            guard let base = bytes.baseAddress else { return nil }
            for (verb, name) in Self.names where name.count == bytes.count {
                if name.withUnsafeBytes({ memcmp($0.baseAddress!, base, name.count) }) == 0 {
                    self = verb
                    return
                }
            }
            return nil
        }

        /// The storage verb, for the storage commands.
        var storage: MemcacheStorageVerb? {
            switch self {
            case .set: return .set
            case .add: return .add
            case .replace: return .replace
            case .append: return .append
            case .prepend: return .prepend
            case .cas: return .cas
            default: return nil
            }
        }
    }

    /// The `get` or `gets` line at `offset` of `buffer`, when it is whole and well formed: what
    /// ``decode(_:at:maximumValueLength:)`` decodes as a retrieval without a touch, found without the enum
    /// of every command (the commands of every read). Nil for anything else: another command, a line not
    /// whole yet, a bad `get` line, one that starts with spaces; ``decode(_:at:maximumValueLength:)`` tells
    /// which.
    @inlinable
    public static func decodeGetLine(_ buffer: UnsafeRawBufferPointer, at offset: Int = 0) -> MemcacheGetLine? {
        // Any other command is told by its first byte, before the line's end is looked for.
        guard offset < buffer.count, buffer[offset] == UInt8(ascii: "g"),
            let newline = firstNewline(in: buffer, from: offset)
        else { return nil }
        let lineEnd = newline > offset && buffer[newline - 1] == UInt8(ascii: "\r") ? newline - 1 : newline
        guard case .keys(let keys, let withCAS) = scanGet(buffer, from: offset, lineEnd: lineEnd) else { return nil }
        return MemcacheGetLine(keys: keys, withCAS: withCAS, end: newline + 1)
    }

    /// What ``scanGet(_:from:lineEnd:)`` found.
    @usableFromInline
    enum GetScan {
        /// A `get` (or `gets`, `withCAS`) of these keys.
        case keys(MemcacheKeyList, withCAS: Bool)
        /// A `get` line without keys, or with a bad one.
        case badKeys
        /// Not a line of `get` or `gets` (or one that starts with spaces): the general path decodes it.
        case otherLine
    }

    /// `get` and `gets` (the commands of every read), decoded without the token array of the other commands,
    /// allocating nothing however many keys: the keys are checked and counted here, and read again from
    /// the line where they are used (``MemcacheKeyList``).
    @usableFromInline
    static func scanGet(_ buffer: UnsafeRawBufferPointer, from offset: Int, lineEnd: Int) -> GetScan {
        let bytes = buffer.baseAddress.unsafelyUnwrapped
        guard lineEnd - offset >= 5, bytes.load(fromByteOffset: offset, as: UInt8.self) == UInt8(ascii: "g"),
            bytes.load(fromByteOffset: offset + 1, as: UInt8.self) == UInt8(ascii: "e"),
            bytes.load(fromByteOffset: offset + 2, as: UInt8.self) == UInt8(ascii: "t")
        else { return .otherLine }
        let withCAS: Bool
        switch bytes.load(fromByteOffset: offset + 3, as: UInt8.self) {
        case 0x20: withCAS = false
        case UInt8(ascii: "s") where bytes.load(fromByteOffset: offset + 4, as: UInt8.self) == 0x20: withCAS = true
        default: return .otherLine
        }
        let base = UnsafeRawPointer(bytes).assumingMemoryBound(to: UInt8.self)
        var cursor = base + offset + (withCAS ? 5 : 4)
        let stop = base + lineEnd
        let bufferEnd = base + buffer.count
        var first = -1
        var last = 0
        var count = 0
        // Each key in one pass: its end found and its bytes checked together (a get of many keys spends most
        // of its decoding here).
        while cursor < stop {
            if cursor.pointee == 0x20 {
                cursor += 1
                continue
            }
            let start = cursor
            // Eight bytes at a time while the buffer has them: the first space, control byte or DEL among them
            // ends the key (a space; or the line's end, where `\r` or `\n` follows) or spoils it (any other).
            while bufferEnd - cursor >= 8 {
                let word = UInt64(littleEndian: UnsafeRawPointer(cursor).loadUnaligned(as: UInt64.self))
                let mask = Self.spaceOrControlMask(word)
                // None: the line's end (a control byte) is not among them either.
                if mask == 0 {
                    cursor += 8
                    continue
                }
                let found = cursor + mask.trailingZeroBitCount / 8
                if found >= stop {
                    cursor = stop
                } else {
                    guard found.pointee == 0x20 else { return .badKeys }
                    cursor = found
                }
                break
            }
            // Near the buffer's end, a byte at a time.
            if bufferEnd - cursor < 8 {
                while cursor < stop {
                    let byte = cursor.pointee
                    if byte == 0x20 { break }
                    guard byte > 0x20 && byte != 0x7f else { return .badKeys }
                    cursor += 1
                }
            }
            guard cursor - start <= maximumKeyLength else { return .badKeys }
            if first < 0 { first = start - base }
            last = cursor - base
            count += 1
        }
        guard first >= 0 else { return .badKeys }
        return .keys(MemcacheKeyList(span: first..<last, count: count), withCAS: withCAS)
    }

    /// The integer the bytes of `range` spell, read as Swift's `init?(_: String)` reads it (an optional `+`
    /// or `-`, then one or more decimal digits, nothing else), without making a string: nil when they spell
    /// none, or one out of `Number`'s range.
    static func parseInteger<Number: FixedWidthInteger>(_ range: Range<Int>, in buffer: UnsafeRawBufferPointer)
        -> Number?
    {
        let bytes = buffer.baseAddress.unsafelyUnwrapped
        var position = range.lowerBound
        guard position < range.upperBound else { return nil }
        var negative = false
        switch bytes.load(fromByteOffset: position, as: UInt8.self) {
        case UInt8(ascii: "-"):
            negative = true
            position += 1
        case UInt8(ascii: "+"):
            position += 1
        default:
            break
        }
        guard position < range.upperBound else { return nil }
        var magnitude: UInt64 = 0
        while position < range.upperBound {
            let digit = bytes.load(fromByteOffset: position, as: UInt8.self) &- UInt8(ascii: "0")
            guard digit < 10 else { return nil }
            let (times10, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times10.addingReportingOverflow(UInt64(digit))
            guard !overflow, !carry else { return nil }
            magnitude = sum
            position += 1
        }
        if negative {
            guard magnitude != 0 else { return 0 }
            guard Number.isSigned, magnitude <= UInt64(Number.max) &+ 1 else { return nil }
            return magnitude == UInt64(Number.max) &+ 1 ? Number.min : 0 - Number(magnitude)
        }
        guard magnitude <= UInt64(Number.max) else { return nil }
        return Number(magnitude)
    }

    /// The high bit of every byte of `word` that is a space, below it (a control byte) or DEL, the bytes that
    /// end or spoil a key (the usual tests for a zero byte and for a byte below a bound, done on every byte at
    /// once), and possibly of bytes after the first such byte (a borrow may carry into them): the lowest bit
    /// set marks the first one exactly.
    @inline(__always)
    static func spaceOrControlMask(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let belowOrSpace = (word &- ones &* 0x21) & ~word & highs
        let delete = word ^ (ones &* 0x7f)
        return belowOrSpace | ((delete &- ones) & ~delete & highs)
    }

    /// Whether the token is a key memcached takes: 1 to 250 bytes, no control character.
    static func isKey(_ range: Range<Int>, in buffer: UnsafeRawBufferPointer) -> Bool {
        guard (1...maximumKeyLength).contains(range.count) else { return false }
        let bytes = buffer.baseAddress.unsafelyUnwrapped
        for index in range {
            let byte = bytes.load(fromByteOffset: index, as: UInt8.self)
            if byte < 0x21 || byte == 0x7f { return false }
        }
        return true
    }

    @usableFromInline
    static func firstNewline(in buffer: UnsafeRawBufferPointer, from offset: Int) -> Int? {
        guard offset < buffer.count, let base = buffer.baseAddress else { return nil }
        guard let found = memchr(base + offset, 0x0a, buffer.count - offset) else { return nil }
        return UnsafeRawPointer(found) - base
    }

    /// Whether the token is `noreply`, compared byte by byte.
    private static func isNoreply(_ range: Range<Int>, in buffer: UnsafeRawBufferPointer) -> Bool {
        guard range.count == 7 else { return false }
        return memcmp(buffer.baseAddress.unsafelyUnwrapped + range.lowerBound, "noreply", 7) == 0
    }

    private static func startsRetrieval(_ buffer: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        let prefix = Array(buffer[offset..<min(buffer.count, offset + 5)])
        return prefix.starts(with: Array("get ".utf8)) || prefix.starts(with: Array("gets ".utf8))
    }
}

/// A whole `get` or `gets` line (``MemcacheTextDecoder/decodeGetLine(_:at:)``).
public struct MemcacheGetLine: Hashable, Sendable {
    /// Its keys.
    public let keys: MemcacheKeyList
    /// Whether it is a `gets`: the CAS unique of every item is asked for.
    public let withCAS: Bool
    /// Where the next command starts.
    public let end: Int

    @inlinable
    init(keys: MemcacheKeyList, withCAS: Bool, end: Int) {
        self.keys = keys
        self.withCAS = withCAS
        self.end = end
    }
}

/// The keys of a `get`, `gets`, `gat` or `gats`, in order: one or more, each checked (1 to 250 bytes, no
/// space or control byte). Held as the part of the line they take and how many there are, so that a
/// decoded retrieval holds no array whatever its number of keys (a get of many keys allocated one, and its
/// command was copied with a reference count); ``ranges(in:)`` reads them from the line again.
public struct MemcacheKeyList: Hashable, Sendable {
    /// The line's bytes from the first key's start to the last key's end: keys separated by spaces.
    public let span: Range<Int>
    /// How many keys.
    public let count: Int

    /// The `count` keys in `span` (which must start and end with a key, and hold only keys and spaces).
    @inlinable
    public init(span: Range<Int>, count: Int) {
        precondition(count > 0, "a retrieval has at least one key")
        self.span = span
        self.count = count
    }

    /// The keys' offsets, in order, read from `buffer`: the buffer they were decoded from.
    @inlinable
    public func ranges(in buffer: UnsafeRawBufferPointer) -> Ranges {
        Ranges(base: buffer.baseAddress.unsafelyUnwrapped, span: span, count: count, bufferCount: buffer.count)
    }

    /// The keys' offsets, found by splitting the span at its spaces (eight bytes at a time where the buffer
    /// has them); the last key is the rest of the span, found without looking at its bytes (so the key of a
    /// get of one key is never read again).
    public struct Ranges: Sequence, IteratorProtocol {
        @usableFromInline let base: UnsafeRawPointer
        @usableFromInline var position: Int
        @usableFromInline let end: Int
        @usableFromInline var remaining: Int
        @usableFromInline let bufferCount: Int

        @inlinable
        init(base: UnsafeRawPointer, span: Range<Int>, count: Int, bufferCount: Int) {
            self.base = base
            position = span.lowerBound
            end = span.upperBound
            remaining = count
            self.bufferCount = bufferCount
        }

        /// The next key's offsets, or nil after the last.
        @inlinable
        public mutating func next() -> Range<Int>? {
            guard remaining > 0 else { return nil }
            remaining -= 1
            while base.load(fromByteOffset: position, as: UInt8.self) == 0x20 { position += 1 }
            let start = position
            if remaining == 0 {
                position = end
                return start..<end
            }
            // Keys hold no space, so the first byte at or below a space ends this one.
            while bufferCount - position >= 8 {
                let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: position, as: UInt64.self))
                let ones: UInt64 = 0x0101_0101_0101_0101
                let mask = (word &- ones &* 0x21) & ~word & (ones &* 0x80)
                if mask == 0 {
                    position += 8
                    continue
                }
                position += mask.trailingZeroBitCount / 8
                return start..<position
            }
            while base.load(fromByteOffset: position, as: UInt8.self) != 0x20 { position += 1 }
            return start..<position
        }
    }
}

/// A storage command's verb.
public enum MemcacheStorageVerb: String, Sendable {
    case set, add, replace, append, prepend, cas
}

/// A command of memcached's text protocol; keys and data are offsets into the decoded buffer.
public enum MemcacheTextCommand: Hashable, Sendable {
    /// `set`, `add`, `replace`, `append`, `prepend` or `cas`: the key, the client's 32-bit flags, the
    /// expiry (memcached's rules: seconds, or a Unix time past 30 days; negative means expired at once), the
    /// data block, the CAS unique of a `cas`, and whether no reply is wanted.
    case store(
        MemcacheStorageVerb,
        key: Range<Int>,
        flags: UInt32,
        exptime: Int64,
        data: Range<Int>,
        cas: UInt64?,
        noreply: Bool
    )
    /// `get`/`gets` (`withCAS`), or `gat`/`gats` with the new expiry (`touch`): one or more keys.
    case retrieve(keys: MemcacheKeyList, withCAS: Bool, touch: Int64?)
    /// `delete KEY [noreply]`.
    case delete(key: Range<Int>, noreply: Bool)
    /// `incr` or `decr KEY DELTA [noreply]`: 64-bit unsigned.
    case arithmetic(increment: Bool, key: Range<Int>, delta: UInt64, noreply: Bool)
    /// `touch KEY EXPTIME [noreply]`.
    case touch(key: Range<Int>, exptime: Int64, noreply: Bool)
    /// `flush_all [DELAY] [noreply]`.
    case flushAll(delay: Int64, noreply: Bool)
    /// `cache_memlimit MEGABYTES [noreply]`: the memory limit changed while the server runs.
    case cacheMemoryLimit(megabytes: UInt64, noreply: Bool)
    /// `version`.
    case version
    /// `verbosity LEVEL [noreply]` (accepted, changes nothing).
    case verbosity(noreply: Bool)
    /// `stats [ARGUMENT]`.
    case stats(argument: Range<Int>?)
    /// `quit`: the connection closes.
    case quit
    /// A meta command: `mg`, `ms`, `md`, `ma`, `mn`, `me`.
    indirect case meta(MemcacheMetaCommand)
}

/// What decoding the bytes at an offset came to.
public enum MemcacheTextDecoding: Hashable, Sendable {
    /// The command is not whole yet.
    case needMore
    /// A command, and where the next one starts.
    case command(MemcacheTextCommand, end: Int)
    /// A bad command: the error to answer with (no line when `noreply`: memcached sends nothing for such a
    /// command, errors included), and where the next one starts; for a value too large, past the bytes
    /// received: discard them as they arrive.
    case failure(MemcacheTextError, end: Int, noreply: Bool = false)
}

/// The errors of memcached's text protocol, each with the line memcached answers.
public enum MemcacheTextError: Hashable, Sendable {
    /// An unknown command, or an empty line: `ERROR`.
    case unknownCommand
    /// Arguments that are missing, extra or not numbers, or a bad key.
    case badFormat
    /// `delete` with arguments other than `[0] [noreply]`.
    case badDeleteFormat
    /// `incr`/`decr` with a delta that is not a 64-bit unsigned number.
    case invalidDelta
    /// A data block not followed by `\r\n`.
    case badDataChunk
    /// A value longer than the node takes (its data block consumed); for a `set`, its key, whose older
    /// value goes too (as memcached unlinks it).
    case tooLarge(replacing: Range<Int>?)
    /// A line with no end in sight: the connection closes, with no reply (as memcached closes it).
    case lineTooLong
    /// A meta command refused: `CLIENT_ERROR` and the reason (`invalid flag`, `duplicate flag`...).
    case clientError(String)
    /// `flush_all` with a delay that is not a number.
    case invalidExptime
    /// A line that is an HTTP request: the connection closes, with no reply.
    case httpRequest

    /// The reply line, `\r\n` included.
    public var line: String {
        switch self {
        case .unknownCommand: return "ERROR\r\n"
        case .badFormat: return "CLIENT_ERROR bad command line format\r\n"
        case .badDeleteFormat: return "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
        case .invalidDelta: return "CLIENT_ERROR invalid numeric delta argument\r\n"
        case .badDataChunk: return "CLIENT_ERROR bad data chunk\r\n"
        case .tooLarge: return "SERVER_ERROR object too large for cache\r\n"
        case .lineTooLong: return ""
        case .clientError(let message): return "CLIENT_ERROR \(message)\r\n"
        case .invalidExptime: return "CLIENT_ERROR invalid exptime argument\r\n"
        case .httpRequest: return ""
        }
    }

    /// Whether the connection closes after the reply (as memcached closes it).
    public var closesConnection: Bool { self == .lineTooLong || self == .httpRequest }
}
