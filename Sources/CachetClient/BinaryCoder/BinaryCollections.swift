/// Arrays, sets and dictionaries with `String` keys, read by ``CachetBinaryCoder`` without Codable's
/// containers: from the same bytes as their `Decodable` conformances read through the coder's containers
/// (an `U` structure of the elements' slots; a `K` structure of the entries), in a fraction of the time,
/// since the standard library's `init(from:)` for a dictionary lists its keys, boxes a container and looks
/// up generic metadata for each (BENCHMARKS.md, "Figures behind choices in the code"). Writing takes the
/// containers: a path of the collections' own there saved less than the cast that chooses it cost.
protocol BinaryDecodableCollection {
    /// The collection in `slot`, which must be a structure of the kind the collection's `Encodable`
    /// conformance writes.
    static func decodeStructure(from input: BinaryInput, _ slot: BinarySlot, path: BinaryPath) throws -> Self
}

/// A dictionary's key in a coding path (one string: an existential holds it without a box).
struct BinaryCollectionKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }

    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension BinaryInput {
    /// Calls `body` with the slot of each element of the unkeyed structure in `slot`.
    func forEachElement(_ slot: BinarySlot, path: BinaryPath, _ body: (BinarySlot) throws -> Void) throws {
        var offset = try BinaryDecoder(input: self, slot: slot, path: path).open("U", [Any].self)
        while let element = try slotOrEnd(at: &offset, codingPath: path.full) { try body(element) }
    }
}

extension Array: BinaryDecodableCollection where Element: Decodable {
    static func decodeStructure(from input: BinaryInput, _ slot: BinarySlot, path: BinaryPath) throws -> Self {
        var array: [Element] = []
        try input.forEachElement(slot, path: path) { element in
            array.append(try input.decode(Element.self, element, path: path))
        }
        return array
    }
}

extension Set: BinaryDecodableCollection where Element: Decodable {
    static func decodeStructure(from input: BinaryInput, _ slot: BinarySlot, path: BinaryPath) throws -> Self {
        var set: Set<Element> = []
        try input.forEachElement(slot, path: path) { element in
            set.insert(try input.decode(Element.self, element, path: path))
        }
        return set
    }
}

extension Dictionary: BinaryDecodableCollection where Key == String, Value: Decodable {
    static func decodeStructure(from input: BinaryInput, _ slot: BinarySlot, path: BinaryPath) throws -> Self {
        let start = try BinaryDecoder(input: input, slot: slot, path: path).open("K", [String: Any].self)
        var dictionary: [String: Value] = [:]
        let parent = path.full
        try input.forEachField(from: start, codingPath: parent) { keyBytes, field in
            let key = String(decoding: UnsafeRawBufferPointer(rebasing: input.raw[keyBytes]), as: UTF8.self)
            // A key written twice (never by this coder) keeps its last value.
            dictionary[key] = try input.decode(
                Value.self,
                field,
                path: BinaryPath(parent: parent, key: BinaryCollectionKey(stringValue: key))
            )
        }
        return dictionary
    }
}
