#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

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
