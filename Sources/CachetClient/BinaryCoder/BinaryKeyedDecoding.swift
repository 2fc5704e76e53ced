#if canImport(Glibc)
import Glibc
#endif
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

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
