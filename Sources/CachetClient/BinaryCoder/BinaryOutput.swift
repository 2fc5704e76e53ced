#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The bytes being written, shared by the containers of one value, and the containers open in it.
///
/// One instance belongs to one ``CachetBinaryCoder/encode(_:)`` call on one thread, and no access to a
/// property overlaps another (none passes a property `inout` to code that reaches the same property), so
/// the run-time exclusivity checks Swift puts on a class's stored properties are turned off for these: they
/// were a large share of an encode's time (BENCHMARKS.md, "Figures behind choices in the code").
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
