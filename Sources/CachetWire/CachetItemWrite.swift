/// A write of an item with the ``CachetRequestFlags/item`` flag (`Protocol/PROTOCOL.md`, "Items: flags,
/// CAS and conditional writes"): what follows the key in such a PUT, `mode: u8 | flags: u32 | cas: u64 |
/// data`. memcached's storage, arithmetic and touch commands, each done at once on the key's owner.
public struct CachetItemWrite: Hashable, Sendable {
    /// What the write does.
    public enum Mode: UInt8, Sendable, CaseIterable {
        /// Stores the data, whatever the key holds.
        case set = 0
        /// Stores the data only if the key holds no value (NOT_STORED otherwise).
        case add = 1
        /// Stores the data only if the key holds a value (NOT_STORED otherwise).
        case replace = 2
        /// Adds the data after the value, keeping its flags and expiry (NOT_STORED without a value); only if
        /// the item's CAS unique is `cas` when `cas` is not 0 (EXISTS if it is another).
        case append = 3
        /// Adds the data before the value, as ``append`` does.
        case prepend = 4
        /// Stores the data only if the item's CAS unique is `cas` (EXISTS if it is another, NOT_FOUND without
        /// a value).
        case compareAndSwap = 5
        /// Adds the data's u64 to the value read as a decimal number, wrapping at 2^64 (NOT_FOUND without a
        /// value, BAD_REQUEST if it is not a number). With a second u64 in the data, a miss creates the item
        /// holding that number (with the PUT's TTL and the flags), answered with it.
        case increment = 6
        /// Subtracts the data's u64 from the value read as a decimal number, stopping at 0.
        case decrement = 7
        /// Sets the item's expiry to the PUT's TTL (NOT_FOUND without a value); no data.
        case touch = 8
        /// ``touch``, answered with the item as a GET with the `item` flag is; no data.
        case getAndTouch = 9
        /// Removes the item if its CAS unique is `cas`, or whatever it is when `cas` is 0 (EXISTS if it is
        /// another, NOT_FOUND without a value); no data.
        case delete = 10
        /// Changes the item in place of removing it (memcached's `md` with `I` or `x`), if its CAS unique is
        /// `cas` when `cas` is not 0 (EXISTS if it is another, NOT_FOUND without a value). The data is one byte
        /// of ``InvalidateOptions``; answered with the item's CAS unique.
        case invalidate = 11
        /// ``compareAndSwap``, except that a `cas` lower than the item's stores the data all the same and
        /// leaves the item stale (memcached's `ms` with `I` and `C`): it keeps its expiry, its staleness and
        /// the key's lease. A write that loaded an older version cannot make the item look fresh.
        case compareAndSwapOrStale = 12
        /// Reads the item with its state (memcached's `mg`); never a write unless it touches or vivifies. The
        /// data is ``MetaGetOptions``' 9 bytes; answered as described at ``metaItemReplyPrefixSize``.
        case metaGet = 13
        /// ``append``, but a miss creates the item holding the data, with the PUT's TTL and the flags
        /// (memcached's `ms` with `MA` and `N`).
        case appendOrCreate = 14
        /// ``prepend``, but a miss creates the item, as ``appendOrCreate`` does.
        case prependOrCreate = 15
    }

    /// The one byte of data of ``Mode/invalidate``.
    public struct InvalidateOptions: OptionSet, Hashable, Sendable {
        public let rawValue: UInt8
        /// Creates options from their byte.
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// The PUT's TTL becomes the item's.
        public static let setTTL = InvalidateOptions(rawValue: 1)
        /// The value is emptied and the flags set to 0 (memcached's tombstone, `md x`); the TTL becomes the
        /// PUT's; the CAS unique stays unless ``stale`` is given too.
        public static let emptyValue = InvalidateOptions(rawValue: 2)
        /// The item is marked stale and given a new CAS unique (`md I`), and the key's lease ends: the next
        /// ``Mode/metaGet`` of it wins its recache.
        public static let stale = InvalidateOptions(rawValue: 4)
    }

    /// The 9 bytes of data of ``Mode/metaGet``: `options: u8 | recache: u32 | vivify_ttl: u32`.
    public struct MetaGetOptions: Hashable, Sendable {
        /// The PUT's TTL becomes the item's before it is read (memcached's `mg` with `T`).
        public var touch: Bool
        /// A miss stores an empty item with `vivifyTTL` and grants the key's lease to the caller (`N`).
        public var vivify: Bool
        /// When above 0, a hit whose item expires in fewer seconds than this wins the key's lease (`R`).
        public var recache: UInt32
        /// The TTL of the empty item a vivified miss stores (0: none).
        public var vivifyTTL: UInt32
        /// The read marks the item neither for the LRU nor as hit (memcached's `mg u`).
        public var noBump: Bool
        /// The reply carries the seconds since the item was last read or written after its state byte
        /// (memcached's `mg l`).
        public var idleTime: Bool

        /// Options.
        public init(
            touch: Bool = false,
            vivify: Bool = false,
            recache: UInt32 = 0,
            vivifyTTL: UInt32 = 0,
            noBump: Bool = false,
            idleTime: Bool = false
        ) {
            self.touch = touch
            self.vivify = vivify
            self.recache = recache
            self.vivifyTTL = vivifyTTL
            self.noBump = noBump
            self.idleTime = idleTime
        }

        /// Their 9 bytes.
        public var encoded: [UInt8] {
            var bytes: [UInt8] = [(touch ? 1 : 0) | (vivify ? 2 : 0) | (noBump ? 4 : 0) | (idleTime ? 8 : 0)]
            withUnsafeBytes(of: recache.bigEndian) { bytes.append(contentsOf: $0) }
            withUnsafeBytes(of: vivifyTTL.bigEndian) { bytes.append(contentsOf: $0) }
            return bytes
        }

        /// Reads them from a write's data (exactly 9 bytes, option bits above 8 clear); nil otherwise.
        public static func decode(_ data: UnsafeRawBufferPointer) -> MetaGetOptions? {
            guard data.count == 9, data[0] & ~15 == 0 else { return nil }
            return MetaGetOptions(
                touch: data[0] & 1 != 0,
                vivify: data[0] & 2 != 0,
                recache: data.loadUnaligned(fromByteOffset: 1, as: UInt32.self).bigEndian,
                vivifyTTL: data.loadUnaligned(fromByteOffset: 5, as: UInt32.self).bigEndian,
                noBump: data[0] & 4 != 0,
                idleTime: data[0] & 8 != 0
            )
        }
    }

    /// The state byte of a ``Mode/metaGet`` reply.
    public struct MetaState: OptionSet, Hashable, Sendable {
        public let rawValue: UInt8
        /// Creates a state from its byte.
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// The item was marked stale (``Mode/invalidate`` with ``InvalidateOptions/stale``): memcached's `X`.
        public static let stale = MetaState(rawValue: 1)
        /// This caller won the key's lease: it is to load the value and store it (`W`).
        public static let won = MetaState(rawValue: 2)
        /// Another caller holds the key's lease (`Z`).
        public static let held = MetaState(rawValue: 4)
        /// The item had been read since it was stored, before this read (memcached's `mg h`).
        public static let hitBefore = MetaState(rawValue: 8)
    }

    /// What the write does.
    public var mode: Mode
    /// The client's flags for the stored item (ignored by the modes that keep the item's own).
    public var flags: UInt32
    /// For ``Mode/compareAndSwap``: the CAS unique the item must have; for the arithmetic modes and
    /// ``Mode/delete``, the one it must have unless 0; ignored otherwise.
    public var cas: UInt64
    /// The data's offsets in the buffer decoded from: the bytes to store, the delta (8 bytes) of the
    /// arithmetic modes, nothing for the touches.
    public var data: Range<Int>
    /// The CAS unique the write gives the item it changes, instead of one of the node's (memcached's `E`):
    /// sent when the mode byte has its high bit (``newCASBit``) set, as 8 bytes after the CAS.
    public var newCAS: UInt64?

    /// Bytes before the data: mode, flags and CAS (and 8 more with ``newCASBit``).
    public static let headerSize = 13

    /// The bit of the mode byte that says a new CAS unique follows the CAS.
    public static let newCASBit: UInt8 = 0x80

    /// A write located in a buffer.
    public init(mode: Mode, flags: UInt32, cas: UInt64, data: Range<Int>, newCAS: UInt64? = nil) {
        self.mode = mode
        self.flags = flags
        self.cas = cas
        self.data = data
        self.newCAS = newCAS
    }

    /// Parses the value field of a PUT with the ``CachetRequestFlags/item`` flag.
    /// - Throws: ``CachetWireError`` `malformedBody` for a field shorter than its 13 bytes, an unknown mode,
    ///   arithmetic data other than 8 bytes, or touch data that is not empty.
    public static func decode(in buffer: UnsafeRawBufferPointer, value: Range<Int>) throws(CachetWireError)
        -> CachetItemWrite
    {
        guard value.count >= headerSize else {
            throw CachetWireError(
                code: .malformedBody,
                message: "PUT of an item: \(value.count) bytes after the key, fewer than the 13 of mode, flags and CAS"
            )
        }
        let modeByte = buffer[value.lowerBound]
        guard let mode = Mode(rawValue: modeByte & ~newCASBit) else {
            throw CachetWireError(
                code: .malformedBody,
                message: "PUT of an item: mode \(modeByte & ~newCASBit) is not one of 0 to 15"
            )
        }
        let carriesNewCAS = modeByte & newCASBit != 0
        guard !carriesNewCAS || value.count >= headerSize + 8 else {
            throw CachetWireError(
                code: .malformedBody,
                message: "PUT of an item: \(value.count) bytes after the key, fewer than the 21 of mode, flags, CAS "
                    + "and new CAS"
            )
        }
        let dataStart = value.lowerBound + headerSize + (carriesNewCAS ? 8 : 0)
        let write = CachetItemWrite(
            mode: mode,
            flags: buffer.loadUnaligned(fromByteOffset: value.lowerBound + 1, as: UInt32.self).bigEndian,
            cas: buffer.loadUnaligned(fromByteOffset: value.lowerBound + 5, as: UInt64.self).bigEndian,
            data: dataStart..<value.upperBound,
            newCAS: carriesNewCAS
                ? buffer.loadUnaligned(fromByteOffset: value.lowerBound + headerSize, as: UInt64.self).bigEndian : nil
        )
        switch mode {
        case .increment, .decrement:
            guard write.data.count == 8 || write.data.count == 16 else {
                throw CachetWireError(
                    code: .malformedBody,
                    message:
                        "PUT of an item: an increment or decrement carries an 8-byte delta (and an 8-byte initial "
                        + "value), not \(write.data.count) bytes"
                )
            }
        case .touch, .getAndTouch, .delete:
            guard write.data.isEmpty else {
                throw CachetWireError(
                    code: .malformedBody,
                    message: "PUT of an item: a touch carries no data, not \(write.data.count) bytes"
                )
            }
        case .invalidate:
            guard write.data.count == 1, buffer[write.data.lowerBound] & ~7 == 0 else {
                throw CachetWireError(
                    code: .malformedBody,
                    message: "PUT of an item: an invalidation carries one byte of options (1, 2 and 4), not "
                        + "\(write.data.count) bytes"
                )
            }
        case .metaGet:
            guard MetaGetOptions.decode(UnsafeRawBufferPointer(rebasing: buffer[write.data])) != nil else {
                throw CachetWireError(
                    code: .malformedBody,
                    message: "PUT of an item: a meta get carries 9 bytes of options (options 1 and 2, recache, "
                        + "vivify TTL), not these \(write.data.count)"
                )
            }
        default:
            break
        }
        return write
    }

    /// The 13 bytes before the data (21 with a new CAS unique).
    public static func encodeHeader(mode: Mode, flags: UInt32 = 0, cas: UInt64 = 0, newCAS: UInt64? = nil) -> [UInt8] {
        var bytes: [UInt8] = [mode.rawValue | (newCAS == nil ? 0 : newCASBit)]
        withUnsafeBytes(of: flags.bigEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: cas.bigEndian) { bytes.append(contentsOf: $0) }
        if let newCAS { withUnsafeBytes(of: newCAS.bigEndian) { bytes.append(contentsOf: $0) } }
        return bytes
    }

    /// The prefix of an OK reply that carries an item (a GET with the `item` flag, or ``Mode/getAndTouch``):
    /// `flags: u32 | cas: u64`, then the value.
    public static let itemReplyPrefixSize = 12

    /// The prefix of an OK reply to ``Mode/metaGet``: `flags: u32 | cas: u64 | ttl: u32 | state: u8`, then
    /// (with ``MetaGetOptions/idleTime``) `idle: u32`, then the value; `ttl` is the seconds the item has left
    /// (0: no expiry), `state` a ``MetaState``, `idle` the seconds since the item was last read or written.
    public static let metaItemReplyPrefixSize = 17

    /// Reads the flags and CAS unique before the value in an item reply's body; nil when it is too short.
    public static func decodeItemReply(_ body: [UInt8]) -> (flags: UInt32, cas: UInt64, valueStart: Int)? {
        guard body.count >= itemReplyPrefixSize else { return nil }
        let flags = body.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self).bigEndian }
        let cas = body.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 4, as: UInt64.self).bigEndian }
        return (flags, cas, itemReplyPrefixSize)
    }
}
