/// Where a watcher stands in a node's stream of changes: the node's run (a random number drawn at each
/// start, so that a restarted node is never taken for the same stream) and the sequence number of the
/// last change seen (`Protocol/PROTOCOL.md`, "WATCH").
public struct CachetWatchPosition: Hashable, Sendable, CustomStringConvertible {
    /// The node's run.
    public var run: UInt64
    /// The last change's sequence number in that run.
    public var sequence: UInt64

    /// A position.
    /// - Parameters:
    ///   - run: the node's run.
    ///   - sequence: the last change seen.
    public init(run: UInt64, sequence: UInt64) {
        self.run = run
        self.sequence = sequence
    }

    /// `RUN:SEQUENCE`, the run in hex: what `cachet-cli watch --from` takes.
    public var description: String { String(run, radix: 16) + ":" + String(sequence) }

    /// Parses `RUN:SEQUENCE` (the run in hex); nil for anything else.
    public init?(_ text: String) {
        let parts = text.split(separator: ":")
        guard parts.count == 2, let run = UInt64(parts[0], radix: 16), let sequence = UInt64(parts[1]) else {
            return nil
        }
        self.init(run: run, sequence: sequence)
    }
}

/// A WATCH request: `options: u8` (bit 0: values) `max_value: u32` `run: u64` `sequence: u64` `prefix`
/// (the rest of the body, 0 to 4096 bytes).
public struct CachetWatchRequest: Hashable, Sendable {
    /// Keys that start with this are watched (empty: every key).
    public var prefix: [UInt8]
    /// Whether events carry the values of PUTs.
    public var includesValues: Bool
    /// Values longer than this are not sent (the event says so).
    public var maximumValueLength: UInt32
    /// Where to resume: the events after it, if the node still has them (else a GAP first); nil: from now.
    public var resumingAfter: CachetWatchPosition?

    /// A WATCH request.
    /// - Parameters:
    ///   - prefix: the key prefix, empty for every key.
    ///   - includesValues: whether PUT events carry values.
    ///   - maximumValueLength: the longest value sent.
    ///   - resumingAfter: the last position seen, to resume after it.
    public init(
        prefix: [UInt8],
        includesValues: Bool = false,
        maximumValueLength: UInt32 = 4096,
        resumingAfter: CachetWatchPosition? = nil
    ) {
        self.prefix = prefix
        self.includesValues = includesValues
        self.maximumValueLength = maximumValueLength
        self.resumingAfter = resumingAfter
    }

    /// Bytes before the prefix.
    public static let fixedSize = 21

    /// The body's bytes.
    public var encoded: [UInt8] {
        var bytes: [UInt8] = [includesValues ? 1 : 0]
        CachetFrameEncoder.appendBigEndian(maximumValueLength, to: &bytes)
        CachetFrameEncoder.appendBigEndian(resumingAfter?.run ?? 0, to: &bytes)
        CachetFrameEncoder.appendBigEndian(resumingAfter?.sequence ?? 0, to: &bytes)
        bytes.append(contentsOf: prefix)
        return bytes
    }

    /// Where a WATCH body's prefix is (for a user's prefix check), after checking the body.
    /// - Throws: ``CachetWireError`` as ``init(decoding:body:)``.
    public static func prefixRange(in buffer: UnsafeRawBufferPointer, body: Range<Int>) throws(CachetWireError)
        -> Range<Int>
    {
        _ = try CachetWatchRequest(decoding: buffer, body: body)
        return (body.lowerBound + fixedSize)..<body.upperBound
    }

    /// Parses a WATCH body.
    /// - Throws: ``CachetWireError`` `malformedBody` for a body shorter than 21 bytes, unknown option bits,
    ///   or a prefix longer than 4096 bytes.
    public init(decoding buffer: UnsafeRawBufferPointer, body: Range<Int>) throws(CachetWireError) {
        guard body.count >= Self.fixedSize else {
            throw CachetBodyDecoder.malformed("WATCH body of \(body.count) bytes is shorter than its 21 fixed bytes")
        }
        let options = buffer[body.lowerBound]
        guard options & ~1 == 0 else {
            throw CachetBodyDecoder.malformed("WATCH options 0x\(hex2(options)) are not defined")
        }
        let prefix = (body.lowerBound + Self.fixedSize)..<body.upperBound
        guard prefix.count <= CachetProtocol.maximumKeyLength else {
            throw CachetBodyDecoder.malformed("WATCH prefix of \(prefix.count) bytes: a prefix is at most 4096 bytes")
        }
        func load<T: FixedWidthInteger>(_ type: T.Type, at offset: Int) -> T {
            buffer.loadUnaligned(fromByteOffset: body.lowerBound + offset, as: T.self).bigEndian
        }
        let run = load(UInt64.self, at: 5)
        let sequence = load(UInt64.self, at: 13)
        self.init(
            prefix: Array(buffer[prefix]),
            includesValues: options & 1 != 0,
            maximumValueLength: load(UInt32.self, at: 1),
            resumingAfter: run == 0 && sequence == 0 ? nil : CachetWatchPosition(run: run, sequence: sequence)
        )
    }
}

/// What changed.
public struct CachetEventKind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The kind's byte.
    public var rawValue: UInt8

    /// A kind from its byte; any byte is representable.
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// A PUT stored a value.
    public static let put = CachetEventKind(rawValue: 1)
    /// A DEL removed the key.
    public static let delete = CachetEventKind(rawValue: 2)
    /// The entry's TTL passed.
    public static let expired = CachetEventKind(rawValue: 3)
    /// The entry was evicted to make room.
    public static let evicted = CachetEventKind(rawValue: 4)
    /// A CLEAR removed every key that starts with the event's key (every key when it is empty).
    public static let clear = CachetEventKind(rawValue: 5)
    /// Events were lost (the watcher fell behind, or resumed after what the node kept, or the node
    /// restarted): the watcher must reload what it holds. The sequence is where the stream goes on.
    public static let gap = CachetEventKind(rawValue: 6)

    /// `put`, `delete`, `expired`, `evicted`, `clear`, `gap`, or `kind-N`.
    public var description: String {
        switch rawValue {
        case 1: return "put"
        case 2: return "delete"
        case 3: return "expired"
        case 4: return "evicted"
        case 5: return "clear"
        case 6: return "gap"
        default: return "kind-\(rawValue)"
        }
    }
}

/// One change, as an EVENT frame carries it: `kind: u8` `flags: u8` (bit 0: the value follows the key;
/// bit 1: the value was too long to send) `sequence: u64` `ttl: u32` `key_len: u16` `key` `value`.
public struct CachetEvent: Hashable, Sendable {
    /// What changed.
    public var kind: CachetEventKind
    /// The node's sequence number of the change (for a GAP: where the stream goes on).
    public var sequence: UInt64
    /// Seconds the entry had left to live, for a PUT (0: no TTL).
    public var ttl: UInt32
    /// The key (for a CLEAR, the prefix cleared; for a GAP, empty).
    public var key: [UInt8]
    /// The value, for a PUT to a watcher that asked for values, when it was short enough.
    public var value: [UInt8]?
    /// Whether the value was left out for its length.
    public var valueOmitted: Bool

    /// An event.
    public init(
        kind: CachetEventKind,
        sequence: UInt64,
        ttl: UInt32 = 0,
        key: [UInt8],
        value: [UInt8]? = nil,
        valueOmitted: Bool = false
    ) {
        self.kind = kind
        self.sequence = sequence
        self.ttl = ttl
        self.key = key
        self.value = value
        self.valueOmitted = valueOmitted
    }

    /// Bytes before the key.
    public static let fixedSize = 16

    /// Appends the EVENT frame (a response frame with opcode EVENT and status OK) for the WATCH `id`.
    public static func appendFrame(
        id: UInt32,
        kind: CachetEventKind,
        sequence: UInt64,
        ttl: UInt32,
        key: [UInt8],
        value: [UInt8]?,
        valueOmitted: Bool,
        to output: inout [UInt8]
    ) {
        CachetFrameEncoder.appendPrefixAndHeader(
            header: CachetFrameHeader(opcode: .event, word: CachetStatus.ok.rawValue, id: id),
            bodyLength: fixedSize + key.count + (value?.count ?? 0),
            to: &output
        )
        output.append(kind.rawValue)
        output.append((value == nil ? 0 : 1) | (valueOmitted ? 2 : 0))
        CachetFrameEncoder.appendBigEndian(sequence, to: &output)
        CachetFrameEncoder.appendBigEndian(ttl, to: &output)
        CachetFrameEncoder.appendBigEndian(UInt16(clamping: key.count), to: &output)
        output.append(contentsOf: key)
        if let value { output.append(contentsOf: value) }
    }

    /// The EVENT frame for the WATCH `id`.
    public func encoded(id: UInt32) -> [UInt8] {
        var output: [UInt8] = []
        Self.appendFrame(
            id: id,
            kind: kind,
            sequence: sequence,
            ttl: ttl,
            key: key,
            value: value,
            valueOmitted: valueOmitted,
            to: &output
        )
        return output
    }

    /// Reads an EVENT frame's body.
    /// - Throws: ``CachetWireError`` `malformedReply` for a body shorter than it says.
    public init(decoding body: some Collection<UInt8>) throws(CachetWireError) {
        let bytes = Array(body)
        guard bytes.count >= Self.fixedSize else {
            throw CachetWireError(code: .malformedReply, message: "EVENT body of \(bytes.count) bytes is too short")
        }
        func integer<T: FixedWidthInteger>(_ range: Range<Int>) -> T { bytes[range].reduce(0) { $0 << 8 | T($1) } }
        let keyLength = Int(integer(14..<16) as UInt16)
        guard Self.fixedSize + keyLength <= bytes.count else {
            throw CachetWireError(code: .malformedReply, message: "EVENT key runs past its body")
        }
        let hasValue = bytes[1] & 1 != 0
        self.init(
            kind: CachetEventKind(rawValue: bytes[0]),
            sequence: integer(2..<10),
            ttl: integer(10..<14),
            key: Array(bytes[Self.fixedSize..<(Self.fixedSize + keyLength)]),
            value: hasValue ? Array(bytes[(Self.fixedSize + keyLength)...]) : nil,
            valueOmitted: bytes[1] & 2 != 0
        )
    }
}
