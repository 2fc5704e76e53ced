#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A compact binary format for Swift consumers: no text to print or parse, small integers in a byte or
/// two, field names once per value so that types can evolve. On typical app records it encodes and decodes
/// 3.5 to 5 times as fast as ``CachetJSONCoder`` (`cachet-bench --coders`; BENCHMARKS.md).
///
/// The format, byte by byte (every value is a *slot*):
/// - A slot starts with an unsigned LEB128 header: 1 is nil; 2 is a *structure* (below) after its length
///   in 4 bytes little-endian; 3 is a structure without its length (a nested container, found by reading
///   it); 4 or more is a primitive: the number minus 4 is its byte count times 8 plus its kind. (0 ends a
///   container's list of slots.)
/// - Primitives, by kind: 0 a signed integer, zigzag LEB128; 1 an unsigned one, LEB128; 2 `Double` or
///   `Date` (seconds since 1970), the IEEE value's 8 bytes; 3 `Float`, 4 bytes; 4 `Bool`, one byte 0 or
///   1; 5 `String`, its UTF-8; 6 `Data` or `[UInt8]`, the bytes. Little-endian throughout. A value read as
///   another kind is a type mismatch (a signed and an unsigned integer read as each other when they fit).
/// - A structure is a tag, then: `K` (keyed) fields, each a key length (1 to 255), the key's UTF-8 and
///   the field's slot, ended by a 0 byte; `U` (unkeyed) slots ended by a 0 header; `S` (single value) one
///   slot.
///
/// Fields are found by name, in order first (a synthesized `Codable` reads them in one pass): a field
/// added to a type as an optional still reads values written before it. Values are written in one pass,
/// so a nested container must be filled before its parent container is written to again (as synthesized
/// `Codable` and ordinary hand-written code do); otherwise encoding fails with an error saying so. The
/// format does not change within a major version of CachetClient.
public struct CachetBinaryCoder: CachetCoder {
    /// A binary coder.
    public init() {}

    /// The value's bytes.
    public func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        let output = BinaryOutput()
        try output.encodeSlot(value, path: BinaryPath())
        if let failure = output.failure { throw failure }
        return output.bytes
    }

    /// A value read from its bytes.
    public func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try bytes.withUnsafeBytes { raw in
            let input = BinaryInput(raw: raw)
            var offset = 0
            let slot = try input.slot(at: &offset, codingPath: [])
            guard offset == raw.count else { throw input.corrupt([], "\(raw.count - offset) bytes after the value") }
            return try input.decode(type, slot, path: BinaryPath())
        }
    }
}

// MARK: - Writing

/// The bytes being written, shared by the containers of one value, and the containers open in it.
///
/// One instance belongs to one ``CachetBinaryCoder/encode(_:)`` call on one thread, and no access to a
/// property overlaps another (none passes a property `inout` to code that reaches the same property), so
/// the run-time exclusivity checks Swift puts on a class's stored properties are turned off for these: they
/// were a fifth of an encode's time (BENCHMARKS.md, "Figures behind choices in the code").
final class BinaryOutput {
    @exclusivity(unchecked) var bytes: [UInt8] = []
    /// Open containers, innermost last: their ids, and the byte that ends each (`K` and `U`; `S` none).
    @exclusivity(unchecked) private var open: [(id: Int, terminator: UInt8?)] = []
    @exclusivity(unchecked) private var nextID = 0
    /// Set when a container was written to after it had been closed.
    @exclusivity(unchecked) var failure: EncodingError?

    init() { bytes.reserveCapacity(256) }

    @inline(__always)
    func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    @inline(__always)
    static func varintSize(_ value: UInt64) -> Int { value == 0 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7 }

    @inline(__always)
    static func zigzag(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }

    /// A primitive slot of `count` bytes; the caller appends them.
    @inline(__always)
    func primitiveHeader(_ count: Int, _ kind: BinaryKind) { varint(UInt64(count) << 3 + UInt64(kind.rawValue) + 4) }

    func encodeNil() { bytes.append(1) }
    func encode(_ value: Bool) { primitiveHeader(1, .bool); bytes.append(value ? 1 : 0) }
    func encode(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            primitiveHeader(utf8.count, .string)
            bytes.append(contentsOf: utf8)
        }
    }
    func encodeSigned(_ value: Int64) {
        let zigzag = Self.zigzag(value)
        primitiveHeader(Self.varintSize(zigzag), .signed)
        varint(zigzag)
    }
    func encodeUnsigned(_ value: UInt64) {
        primitiveHeader(Self.varintSize(value), .unsigned)
        varint(value)
    }
    func encode(_ value: Double) {
        primitiveHeader(8, .double)
        withUnsafeBytes(of: value.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
    }
    func encode(_ value: Float) {
        primitiveHeader(4, .float)
        withUnsafeBytes(of: value.bitPattern.littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// A slot for any value: primitives directly, anything else as a structure through its `encode(to:)`.
    func encodeSlot<T: Encodable>(_ value: T, path: @autoclosure () -> BinaryPath) throws {
        if T.self == String.self { return encode(unsafeBitCast(value, to: String.self)) }
        if T.self == Int.self { return encodeSigned(Int64(unsafeBitCast(value, to: Int.self))) }
        if T.self == Double.self { return encode(unsafeBitCast(value, to: Double.self)) }
        if T.self == Bool.self { return encode(unsafeBitCast(value, to: Bool.self)) }
        if T.self == Date.self { return encode(unsafeBitCast(value, to: Date.self).timeIntervalSince1970) }
        if T.self == Data.self {
            let data = unsafeBitCast(value, to: Data.self)
            primitiveHeader(data.count, .bytes)
            return bytes.append(contentsOf: data)
        }
        if T.self == [UInt8].self {
            let array = unsafeBitCast(value, to: [UInt8].self)
            primitiveHeader(array.count, .bytes)
            return bytes.append(contentsOf: array)
        }
        bytes.append(2)
        let lengthOffset = bytes.count
        bytes.append(contentsOf: [0, 0, 0, 0])
        let depth = open.count
        let start = bytes.count
        try value.encode(to: BinaryEncoder(output: self, path: path()))
        close(to: depth)
        // A value that asked for no container is an empty keyed one.
        if bytes.count == start { bytes.append(contentsOf: [UInt8(ascii: "K"), 0]) }
        let length = bytes.count - start
        guard length <= Int(UInt32.max) else {
            throw EncodingError.invalidValue(
                value,
                .init(codingPath: path().full, debugDescription: "a value of \(length) bytes is too long")
            )
        }
        withUnsafeBytes(of: UInt32(length).littleEndian) { raw in
            for index in 0..<4 { bytes[lengthOffset + index] = raw[index] }
        }
    }

    /// Opens a container (its tag written); returns its id.
    func openContainer(_ tag: Character) -> Int {
        bytes.append(tag.asciiValue!)
        nextID += 1
        open.append((nextID, tag == "S" ? nil : 0))
        return nextID
    }

    /// Closes the containers above `depth`, writing their terminators.
    func close(to depth: Int) {
        while open.count > depth {
            if let terminator = open.removeLast().terminator { bytes.append(terminator) }
        }
    }

    /// Before container `id` writes: the containers nested in it are done, and closed. False (with
    /// ``failure`` set) when `id` was closed already.
    @inline(__always)
    func willWrite(_ id: Int, codingPath: @autoclosure () -> [any CodingKey]) -> Bool {
        if open.last?.id == id { return true }
        guard let index = open.lastIndex(where: { $0.id == id }) else {
            failure = EncodingError.invalidValue(
                0,
                .init(
                    codingPath: codingPath(),
                    debugDescription:
                        "CachetBinaryCoder writes in one pass: a container was written to after its parent went on"
                )
            )
            return false
        }
        close(to: index + 1)
        return true
    }
}

struct BinaryEncoder: Encoder {
    let output: BinaryOutput
    let path: BinaryPath
    var codingPath: [any CodingKey] { path.full }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(
            BinaryKeyedEncoding<Key>(output: output, id: output.openContainer("K"), path: path)
        )
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        BinaryUnkeyedEncoding(output: output, id: output.openContainer("U"), path: path)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        BinarySingleValueEncoding(output: output, id: output.openContainer("S"), path: path)
    }
}

struct BinaryKeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let output: BinaryOutput
    let id: Int
    let path: BinaryPath
    var codingPath: [any CodingKey] { path.full }

    /// Writes the key; false when the container may not be written to.
    private func field(_ key: Key) throws -> Bool {
        guard output.willWrite(id, codingPath: codingPath + [key]) else { return false }
        let text = key.stringValue
        var name = text
        try name.withUTF8 { utf8 in
            guard (1...255).contains(utf8.count) else {
                throw EncodingError.invalidValue(
                    text,
                    .init(codingPath: codingPath + [key], debugDescription: "CachetBinaryCoder keys are 1 to 255 bytes")
                )
            }
            output.bytes.append(UInt8(utf8.count))
            output.bytes.append(contentsOf: utf8)
        }
        return true
    }

    mutating func encodeNil(forKey key: Key) throws { if try field(key) { output.encodeNil() } }
    mutating func encode(_ value: Bool, forKey key: Key) throws { if try field(key) { output.encode(value) } }
    mutating func encode(_ value: String, forKey key: Key) throws { if try field(key) { output.encode(value) } }
    mutating func encode(_ value: Double, forKey key: Key) throws { if try field(key) { output.encode(value) } }
    mutating func encode(_ value: Float, forKey key: Key) throws { if try field(key) { output.encode(value) } }
    mutating func encode(_ value: Int, forKey key: Key) throws {
        if try field(key) { output.encodeSigned(Int64(value)) }
    }
    mutating func encode(_ value: Int8, forKey key: Key) throws {
        if try field(key) { output.encodeSigned(Int64(value)) }
    }
    mutating func encode(_ value: Int16, forKey key: Key) throws {
        if try field(key) { output.encodeSigned(Int64(value)) }
    }
    mutating func encode(_ value: Int32, forKey key: Key) throws {
        if try field(key) { output.encodeSigned(Int64(value)) }
    }
    mutating func encode(_ value: Int64, forKey key: Key) throws { if try field(key) { output.encodeSigned(value) } }
    mutating func encode(_ value: UInt, forKey key: Key) throws {
        if try field(key) { output.encodeUnsigned(UInt64(value)) }
    }
    mutating func encode(_ value: UInt8, forKey key: Key) throws {
        if try field(key) { output.encodeUnsigned(UInt64(value)) }
    }
    mutating func encode(_ value: UInt16, forKey key: Key) throws {
        if try field(key) { output.encodeUnsigned(UInt64(value)) }
    }
    mutating func encode(_ value: UInt32, forKey key: Key) throws {
        if try field(key) { output.encodeUnsigned(UInt64(value)) }
    }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { if try field(key) { output.encodeUnsigned(value) } }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        if try field(key) { try output.encodeSlot(value, path: path.appending(key)) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type,
        forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        _ = try? field(key)
        output.bytes.append(3)
        return BinaryEncoder(output: output, path: path.appending(key)).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        _ = try? field(key)
        output.bytes.append(3)
        return BinaryEncoder(output: output, path: path.appending(key)).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder { superEncoder(forKey: Key(stringValue: "super")!) }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        _ = try? field(key)
        output.bytes.append(3)
        // What the super encoder writes is one single-value structure.
        return BinaryEncoder(output: output, path: path.appending(key)).superStructure()
    }
}

extension BinaryEncoder {
    /// An encoder for a super class's value: its container is written inside an `S` structure's slot.
    func superStructure() -> any Encoder {
        _ = output.openContainer("S")
        output.bytes.append(3)
        return self
    }
}

struct BinaryUnkeyedEncoding: UnkeyedEncodingContainer {
    let output: BinaryOutput
    let id: Int
    let path: BinaryPath
    var codingPath: [any CodingKey] { path.full }
    var count = 0

    private mutating func element() -> Bool {
        guard output.willWrite(id, codingPath: codingPath) else { return false }
        count += 1
        return true
    }

    mutating func encodeNil() throws { if element() { output.encodeNil() } }
    mutating func encode(_ value: Bool) throws { if element() { output.encode(value) } }
    mutating func encode(_ value: String) throws { if element() { output.encode(value) } }
    mutating func encode(_ value: Double) throws { if element() { output.encode(value) } }
    mutating func encode(_ value: Float) throws { if element() { output.encode(value) } }
    mutating func encode(_ value: Int) throws { if element() { output.encodeSigned(Int64(value)) } }
    mutating func encode(_ value: Int64) throws { if element() { output.encodeSigned(value) } }
    mutating func encode(_ value: UInt64) throws { if element() { output.encodeUnsigned(value) } }
    mutating func encode(_ value: UInt8) throws { if element() { output.encodeUnsigned(UInt64(value)) } }

    mutating func encode<T: Encodable>(_ value: T) throws {
        if element() { try output.encodeSlot(value, path: path) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type
    ) -> KeyedEncodingContainer<NestedKey> {
        _ = element()
        output.bytes.append(3)
        return BinaryEncoder(output: output, path: path).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        _ = element()
        output.bytes.append(3)
        return BinaryEncoder(output: output, path: path).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        _ = element()
        output.bytes.append(3)
        return BinaryEncoder(output: output, path: path).superStructure()
    }
}

struct BinarySingleValueEncoding: SingleValueEncodingContainer {
    let output: BinaryOutput
    let id: Int
    let path: BinaryPath
    var codingPath: [any CodingKey] { path.full }

    private func slot() -> Bool { output.willWrite(id, codingPath: codingPath) }

    mutating func encodeNil() throws { if slot() { output.encodeNil() } }
    mutating func encode(_ value: Bool) throws { if slot() { output.encode(value) } }
    mutating func encode(_ value: String) throws { if slot() { output.encode(value) } }
    mutating func encode(_ value: Double) throws { if slot() { output.encode(value) } }
    mutating func encode(_ value: Float) throws { if slot() { output.encode(value) } }
    mutating func encode(_ value: Int) throws { if slot() { output.encodeSigned(Int64(value)) } }
    mutating func encode(_ value: Int8) throws { if slot() { output.encodeSigned(Int64(value)) } }
    mutating func encode(_ value: Int16) throws { if slot() { output.encodeSigned(Int64(value)) } }
    mutating func encode(_ value: Int32) throws { if slot() { output.encodeSigned(Int64(value)) } }
    mutating func encode(_ value: Int64) throws { if slot() { output.encodeSigned(value) } }
    mutating func encode(_ value: UInt) throws { if slot() { output.encodeUnsigned(UInt64(value)) } }
    mutating func encode(_ value: UInt8) throws { if slot() { output.encodeUnsigned(UInt64(value)) } }
    mutating func encode(_ value: UInt16) throws { if slot() { output.encodeUnsigned(UInt64(value)) } }
    mutating func encode(_ value: UInt32) throws { if slot() { output.encodeUnsigned(UInt64(value)) } }
    mutating func encode(_ value: UInt64) throws { if slot() { output.encodeUnsigned(value) } }

    mutating func encode<T: Encodable>(_ value: T) throws {
        if slot() { try output.encodeSlot(value, path: path) }
    }
}

// MARK: - Reading

/// A coding path as the containers keep it: the parent's and one key, made into an array only when asked
/// (an error, a type that reads `codingPath`), so that a field costs no array.
struct BinaryPath {
    var parent: [any CodingKey] = []
    var key: (any CodingKey)?

    var full: [any CodingKey] {
        guard let key else { return parent }
        return parent + [key]
    }

    func appending(_ key: any CodingKey) -> BinaryPath { BinaryPath(parent: full, key: key) }
}

/// What a primitive slot holds.
enum BinaryKind: UInt8, CustomStringConvertible {
    case signed, unsigned, double, float, bool, string, bytes

    var isInteger: Bool { self == .signed || self == .unsigned }

    var description: String {
        switch self {
        case .signed: return "signed integer"
        case .unsigned: return "unsigned integer"
        case .double: return "Double"
        case .float: return "Float"
        case .bool: return "Bool"
        case .string: return "String"
        case .bytes: return "byte string"
        }
    }
}

/// Where a slot's value is.
enum BinarySlot {
    case none
    /// A primitive's bytes, and its kind.
    case bytes(Range<Int>, BinaryKind)
    /// A structure: its tag's offset.
    case structure(Int)
}

/// The bytes being read: valid while ``CachetBinaryCoder/decode(_:from:)`` runs.
struct BinaryInput {
    let raw: UnsafeRawBufferPointer

    func corrupt(_ codingPath: [any CodingKey], _ what: String) -> DecodingError {
        .dataCorrupted(.init(codingPath: codingPath, debugDescription: "not a CachetBinaryCoder value: \(what)"))
    }

    @inline(__always)
    func varint(at offset: inout Int, end: Int, codingPath: @autoclosure () -> [any CodingKey]) throws -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard offset < end, shift < 64 else { throw corrupt(codingPath(), "a number runs past its end") }
            let byte = raw[offset]
            offset += 1
            value |= UInt64(byte & 0x7f) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
    }

    /// The slot at `offset`, moving `offset` past it; nil for a container's end. (Not `@inline(__always)`:
    /// inlined into a caller's loop over a container, Swift 6.3's optimizer does not finish.)
    func slotOrEnd(at offset: inout Int, codingPath: @autoclosure () -> [any CodingKey]) throws -> BinarySlot? {
        let header = try varint(at: &offset, end: raw.count, codingPath: codingPath())
        switch header {
        case 0: return nil
        case 1: return BinarySlot.none
        case 2:
            guard offset + 4 <= raw.count else { throw corrupt(codingPath(), "it ends inside a length") }
            let length = Int(raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian)
            offset += 4
            guard length >= 1, length <= raw.count - offset else {
                throw corrupt(codingPath(), "a value runs past the end")
            }
            defer { offset += length }
            return .structure(offset)
        case 3:
            let start = offset
            try skipStructure(at: &offset, codingPath: codingPath())
            return .structure(start)
        default:
            let count = Int((header - 4) >> 3)
            guard count <= raw.count - offset, let kind = BinaryKind(rawValue: UInt8((header - 4) & 7)) else {
                throw corrupt(codingPath(), "a value runs past the end, or is of no known kind")
            }
            defer { offset += count }
            return .bytes(offset..<(offset + count), kind)
        }
    }

    func slot(at offset: inout Int, codingPath: @autoclosure () -> [any CodingKey]) throws -> BinarySlot {
        guard let slot = try slotOrEnd(at: &offset, codingPath: codingPath()) else {
            throw corrupt(codingPath(), "a value is missing")
        }
        return slot
    }

    /// Moves `offset` past the structure whose tag is at `offset`.
    func skipStructure(at offset: inout Int, codingPath: @autoclosure () -> [any CodingKey]) throws {
        guard offset < raw.count else { throw corrupt(codingPath(), "a structure is missing") }
        let tag = raw[offset]
        offset += 1
        switch tag {
        case UInt8(ascii: "K"):
            while true {
                guard offset < raw.count else { throw corrupt(codingPath(), "a keyed container is not ended") }
                let length = Int(raw[offset])
                offset += 1
                if length == 0 { return }
                offset += length
                _ = try slot(at: &offset, codingPath: codingPath())
            }
        case UInt8(ascii: "U"):
            while try slotOrEnd(at: &offset, codingPath: codingPath()) != nil {}
        case UInt8(ascii: "S"):
            _ = try slot(at: &offset, codingPath: codingPath())
        default:
            throw corrupt(codingPath(), "unknown structure tag \(tag)")
        }
    }

    /// Calls `body` with each field's key bytes and slot of the keyed container whose fields start at
    /// `start`, in the order written.
    @inline(__always)
    func forEachField(
        from start: Int,
        codingPath: @autoclosure () -> [any CodingKey],
        _ body: (Range<Int>, BinarySlot) throws -> Void
    ) throws {
        var offset = start
        while true {
            guard offset < raw.count else { throw corrupt(codingPath(), "a keyed container is not ended") }
            let length = Int(raw[offset])
            offset += 1
            if length == 0 { return }
            guard length <= raw.count - offset else { throw corrupt(codingPath(), "a key runs past the end") }
            let key = offset..<(offset + length)
            offset += length
            try body(key, try slot(at: &offset, codingPath: codingPath()))
        }
    }

    func primitive(
        _ slot: BinarySlot,
        _ type: Any.Type,
        _ kind: BinaryKind,
        codingPath: @autoclosure () -> [any CodingKey]
    ) throws -> Range<Int> {
        switch slot {
        case .bytes(let range, let found):
            if found == kind || (kind.isInteger && found.isInteger) { return range }
            throw DecodingError.typeMismatch(
                type,
                .init(codingPath: codingPath(), debugDescription: "a \(found) where \(type) was expected")
            )
        case .none: throw DecodingError.valueNotFound(type, .init(codingPath: codingPath(), debugDescription: "nil"))
        case .structure:
            throw DecodingError.typeMismatch(
                type,
                .init(codingPath: codingPath(), debugDescription: "a structure where \(type) was expected")
            )
        }
    }

    func string(_ slot: BinarySlot, codingPath: @autoclosure () -> [any CodingKey]) throws -> String {
        String(
            decoding: UnsafeRawBufferPointer(
                rebasing: raw[try primitive(slot, String.self, .string, codingPath: codingPath())]
            ),
            as: UTF8.self
        )
    }

    func signed(_ slot: BinarySlot, codingPath: @autoclosure () -> [any CodingKey]) throws -> Int64 {
        let range = try primitive(slot, Int.self, .signed, codingPath: codingPath())
        var offset = range.lowerBound
        let raw = try varint(at: &offset, end: range.upperBound, codingPath: codingPath())
        guard offset == range.upperBound else { throw corrupt(codingPath(), "not an integer") }
        guard case .bytes(_, .unsigned) = slot else { return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1) }
        guard let value = Int64(exactly: raw) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: codingPath(), debugDescription: "\(raw) does not fit Int64")
            )
        }
        return value
    }

    func unsigned(_ slot: BinarySlot, codingPath: @autoclosure () -> [any CodingKey]) throws -> UInt64 {
        let range = try primitive(slot, UInt.self, .unsigned, codingPath: codingPath())
        var offset = range.lowerBound
        let value = try varint(at: &offset, end: range.upperBound, codingPath: codingPath())
        guard offset == range.upperBound else { throw corrupt(codingPath(), "not an integer") }
        guard case .bytes(_, .signed) = slot else { return value }
        let signed = Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1)
        guard let exact = UInt64(exactly: signed) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: codingPath(), debugDescription: "\(signed) does not fit UInt64")
            )
        }
        return exact
    }

    func fitting<T: FixedWidthInteger>(
        _ value: some BinaryInteger,
        _ type: T.Type,
        codingPath: @autoclosure () -> [any CodingKey]
    ) throws -> T {
        guard let exact = T(exactly: value) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: codingPath(), debugDescription: "\(value) does not fit \(T.self)")
            )
        }
        return exact
    }

    func double(_ slot: BinarySlot, codingPath: @autoclosure () -> [any CodingKey]) throws -> Double {
        let range = try primitive(slot, Double.self, .double, codingPath: codingPath())
        guard range.count == 8 else { throw corrupt(codingPath(), "not a Double") }
        return Double(bitPattern: raw.loadUnaligned(fromByteOffset: range.lowerBound, as: UInt64.self).littleEndian)
    }

    func float(_ slot: BinarySlot, codingPath: @autoclosure () -> [any CodingKey]) throws -> Float {
        let range = try primitive(slot, Float.self, .float, codingPath: codingPath())
        guard range.count == 4 else { throw corrupt(codingPath(), "not a Float") }
        return Float(bitPattern: raw.loadUnaligned(fromByteOffset: range.lowerBound, as: UInt32.self).littleEndian)
    }

    func bool(_ slot: BinarySlot, codingPath: @autoclosure () -> [any CodingKey]) throws -> Bool {
        let range = try primitive(slot, Bool.self, .bool, codingPath: codingPath())
        guard range.count == 1, raw[range.lowerBound] <= 1 else { throw corrupt(codingPath(), "not a Bool") }
        return raw[range.lowerBound] == 1
    }

    /// Any value from its slot: primitives directly, anything else through its `init(from:)`.
    func decode<T: Decodable>(_ type: T.Type, _ slot: BinarySlot, path: @autoclosure () -> BinaryPath) throws -> T {
        if T.self == String.self { return unsafeBitCast(try string(slot, codingPath: path().full), to: T.self) }
        if T.self == Int.self { return unsafeBitCast(Int(try signed(slot, codingPath: path().full)), to: T.self) }
        if T.self == Double.self { return unsafeBitCast(try double(slot, codingPath: path().full), to: T.self) }
        if T.self == Bool.self { return unsafeBitCast(try bool(slot, codingPath: path().full), to: T.self) }
        if T.self == Date.self {
            return unsafeBitCast(Date(timeIntervalSince1970: try double(slot, codingPath: path().full)), to: T.self)
        }
        if T.self == Data.self {
            let range = try primitive(slot, T.self, .bytes, codingPath: path().full)
            return unsafeBitCast(Data(UnsafeRawBufferPointer(rebasing: raw[range])), to: T.self)
        }
        if T.self == [UInt8].self {
            let range = try primitive(slot, T.self, .bytes, codingPath: path().full)
            return unsafeBitCast(Array(UnsafeRawBufferPointer(rebasing: raw[range])), to: T.self)
        }
        if let collection = T.self as? any BinaryDecodableCollection.Type {
            return try decodeStructure(collection, slot, path: path())
        }
        return try T(from: BinaryDecoder(input: self, slot: slot, path: path()))
    }

    /// A collection of type `Collection`, which is `T`, read without Codable's containers.
    private func decodeStructure<Collection: BinaryDecodableCollection, T>(
        _ collection: Collection.Type,
        _ slot: BinarySlot,
        path: BinaryPath
    ) throws -> T {
        unsafeBitCast(try Collection.decodeStructure(from: self, slot, path: path), to: T.self)
    }
}

struct BinaryDecoder: Decoder {
    let input: BinaryInput
    let slot: BinarySlot
    let path: BinaryPath
    var codingPath: [any CodingKey] { path.full }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// The offset after the structure's tag, which must be `tag`.
    func open(_ tag: Character, _ type: Any.Type) throws -> Int {
        guard case .structure(let start) = slot, input.raw[start] == tag.asciiValue! else {
            if case .none = slot {
                throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "nil"))
            }
            throw DecodingError.typeMismatch(type, .init(codingPath: codingPath, debugDescription: "not a \(type)"))
        }
        return start + 1
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(
            BinaryKeyedDecoding<Key>(input: input, start: try open("K", [String: Any].self), path: path)
        )
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        BinaryUnkeyedDecoding(input: input, offset: try open("U", [Any].self), path: path)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        // A primitive or nil slot is its own single value.
        guard case .structure = slot else {
            return BinarySingleValueDecoding(input: input, slot: slot, path: path)
        }
        var offset = try open("S", Any.self)
        return BinarySingleValueDecoding(
            input: input,
            slot: try input.slot(at: &offset, codingPath: codingPath),
            path: path
        )
    }
}

final class BinaryKeyedDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let input: BinaryInput
    let path: BinaryPath
    var codingPath: [any CodingKey] { path.full }
    private let start: Int
    /// The next field's offset, for a read in the order written; -1 once the container's end was reached.
    private var next: Int
    /// Every field, made on the first read out of order.
    private var index: [(key: Range<Int>, slot: BinarySlot)]?

    init(input: BinaryInput, start: Int, path: BinaryPath) {
        self.input = input
        self.start = start
        self.next = start
        self.path = path
    }

    private func matches(_ range: Range<Int>, _ key: Key) -> Bool {
        var name = key.stringValue
        return name.withUTF8 { utf8 in
            utf8.count == range.count
                && (range.isEmpty
                    || memcmp(utf8.baseAddress!, input.raw.baseAddress! + range.lowerBound, range.count) == 0)
        }
    }

    private func fields() throws -> [(key: Range<Int>, slot: BinarySlot)] {
        if let index { return index }
        var fields: [(key: Range<Int>, slot: BinarySlot)] = []
        try input.forEachField(from: start, codingPath: codingPath) { fields.append(($0, $1)) }
        index = fields
        return fields
    }

    /// The field's slot: the next one when it is the key (one pass for a synthesized `init(from:)`), else
    /// found by name; nil when there is none.
    private func find(_ key: Key) throws -> BinarySlot? {
        if next >= 0, index == nil {
            var offset = next
            guard offset < input.raw.count else { throw input.corrupt(codingPath, "a keyed container is not ended") }
            let length = Int(input.raw[offset])
            if length > 0, length <= input.raw.count - offset - 1, matches((offset + 1)..<(offset + 1 + length), key) {
                offset += 1 + length
                let slot = try input.slot(at: &offset, codingPath: codingPath)
                next = offset
                return slot
            }
        }
        return try fields().first { matches($0.key, key) }?.slot
    }

    private func required(_ key: Key) throws -> BinarySlot {
        guard let slot = try find(key) else {
            throw DecodingError.keyNotFound(
                key,
                .init(codingPath: codingPath, debugDescription: "no field '\(key.stringValue)'")
            )
        }
        return slot
    }

    var allKeys: [Key] {
        ((try? fields()) ?? []).compactMap {
            Key(stringValue: String(decoding: UnsafeRawBufferPointer(rebasing: input.raw[$0.key]), as: UTF8.self))
        }
    }

    func contains(_ key: Key) -> Bool { ((try? fields()) ?? []).contains { matches($0.key, key) } }

    func decodeNil(forKey key: Key) throws -> Bool {
        guard let slot = try fields().first(where: { matches($0.key, key) })?.slot else { return true }
        if case .none = slot { return true }
        return false
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool {
        try input.bool(try required(key), codingPath: self.codingPath + [key])
    }
    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        try input.string(try required(key), codingPath: self.codingPath + [key])
    }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
        try input.double(try required(key), codingPath: self.codingPath + [key])
    }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float {
        try input.float(try required(key), codingPath: self.codingPath + [key])
    }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int {
        Int(try input.signed(try required(key), codingPath: self.codingPath + [key]))
    }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 {
        try input.signed(try required(key), codingPath: self.codingPath + [key])
    }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try signed(type, forKey: key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try signed(type, forKey: key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try signed(type, forKey: key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 {
        try input.unsigned(try required(key), codingPath: self.codingPath + [key])
    }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try unsigned(type, forKey: key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try unsigned(type, forKey: key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try unsigned(type, forKey: key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try unsigned(type, forKey: key) }

    /// A fixed-width integer written signed, checked to fit `type`.
    private func signed<T: FixedWidthInteger>(_ type: T.Type, forKey key: Key) throws -> T {
        try input.fitting(
            try input.signed(try required(key), codingPath: codingPath + [key]),
            type,
            codingPath: codingPath + [key]
        )
    }

    /// A fixed-width integer written unsigned, checked to fit `type`.
    private func unsigned<T: FixedWidthInteger>(_ type: T.Type, forKey key: Key) throws -> T {
        try input.fitting(
            try input.unsigned(try required(key), codingPath: codingPath + [key]),
            type,
            codingPath: codingPath + [key]
        )
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try input.decode(type, try required(key), path: self.path.appending(key))
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let slot = try find(key) else { return nil }
        if case .none = slot { return nil }
        return try input.decode(type, slot, path: self.path.appending(key))
    }

    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? {
        guard let slot = try find(key) else { return nil }
        if case .none = slot { return nil }
        return try input.string(slot, codingPath: self.codingPath + [key])
    }

    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? {
        guard let slot = try find(key) else { return nil }
        if case .none = slot { return nil }
        return Int(try input.signed(slot, codingPath: self.codingPath + [key]))
    }

    func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? {
        guard let slot = try find(key) else { return nil }
        if case .none = slot { return nil }
        return try input.double(slot, codingPath: self.codingPath + [key])
    }

    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? {
        guard let slot = try find(key) else { return nil }
        if case .none = slot { return nil }
        return try input.bool(slot, codingPath: self.codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type,
        forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try BinaryDecoder(input: input, slot: try required(key), path: path.appending(key)).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try BinaryDecoder(input: input, slot: try required(key), path: path.appending(key)).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { try superDecoder(forKey: Key(stringValue: "super")!) }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        // The super encoder's value sits in the slot of an `S` structure.
        let outer = BinaryDecoder(input: input, slot: try required(key), path: path.appending(key))
        let single = try outer.singleValueContainer() as! BinarySingleValueDecoding
        return BinaryDecoder(input: input, slot: single.slot, path: path.appending(key))
    }
}

struct BinaryUnkeyedDecoding: UnkeyedDecodingContainer {
    let input: BinaryInput
    let path: BinaryPath
    var codingPath: [any CodingKey] { path.full }
    private var offset: Int
    /// The next element's slot; nil at the end.
    private var upcoming: BinarySlot?
    private(set) var currentIndex = 0
    private var failure: (any Error)?

    init(input: BinaryInput, offset: Int, path: BinaryPath) {
        self.input = input
        self.offset = offset
        self.path = path
        advance()
    }

    private mutating func advance() {
        do {
            var offset = self.offset
            defer { self.offset = offset }
            upcoming = try input.slotOrEnd(at: &offset, codingPath: path.full)
        } catch {
            upcoming = nil
            failure = error
        }
    }

    var count: Int? { nil }
    var isAtEnd: Bool { upcoming == nil && failure == nil }

    private mutating func next(_ type: Any.Type) throws -> BinarySlot {
        if let failure { throw failure }
        guard let slot = upcoming else {
            throw DecodingError.valueNotFound(
                type,
                .init(codingPath: codingPath, debugDescription: "only \(currentIndex) elements")
            )
        }
        currentIndex += 1
        advance()
        return slot
    }

    mutating func decodeNil() throws -> Bool {
        guard case .some(.none) = upcoming else { return false }
        _ = try next(Any.self)
        return true
    }

    mutating func decode(_ type: String.Type) throws -> String {
        try input.string(try next(type), codingPath: codingPath)
    }
    mutating func decode(_ type: Int.Type) throws -> Int {
        Int(try input.signed(try next(type), codingPath: codingPath))
    }
    mutating func decode(_ type: Double.Type) throws -> Double {
        try input.double(try next(type), codingPath: codingPath)
    }
    mutating func decode(_ type: Bool.Type) throws -> Bool { try input.bool(try next(type), codingPath: codingPath) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 {
        try input.fitting(try input.unsigned(try next(type), codingPath: codingPath), type, codingPath: codingPath)
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try input.decode(type, try next(type), path: path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type
    ) throws -> KeyedDecodingContainer<NestedKey> {
        try BinaryDecoder(input: input, slot: try next([String: Any].self), path: path).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try BinaryDecoder(input: input, slot: try next([Any].self), path: path).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let outer = BinaryDecoder(input: input, slot: try next(Any.self), path: path)
        let single = try outer.singleValueContainer() as! BinarySingleValueDecoding
        return BinaryDecoder(input: input, slot: single.slot, path: path)
    }
}

struct BinarySingleValueDecoding: SingleValueDecodingContainer {
    let input: BinaryInput
    let slot: BinarySlot
    let path: BinaryPath
    var codingPath: [any CodingKey] { path.full }

    func decodeNil() -> Bool {
        if case .none = slot { return true }
        return false
    }

    func decode(_ type: String.Type) throws -> String { try input.string(slot, codingPath: codingPath) }
    func decode(_ type: Int.Type) throws -> Int { Int(try input.signed(slot, codingPath: codingPath)) }
    func decode(_ type: Int8.Type) throws -> Int8 { try signed(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try signed(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try signed(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try input.signed(slot, codingPath: codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try unsigned(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try unsigned(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try unsigned(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try unsigned(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try input.unsigned(slot, codingPath: codingPath) }

    private func signed<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        try input.fitting(try input.signed(slot, codingPath: codingPath), type, codingPath: codingPath)
    }

    private func unsigned<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        try input.fitting(try input.unsigned(slot, codingPath: codingPath), type, codingPath: codingPath)
    }
    func decode(_ type: Double.Type) throws -> Double { try input.double(slot, codingPath: codingPath) }
    func decode(_ type: Float.Type) throws -> Float { try input.float(slot, codingPath: codingPath) }
    func decode(_ type: Bool.Type) throws -> Bool { try input.bool(slot, codingPath: codingPath) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try input.decode(type, slot, path: path) }
}
