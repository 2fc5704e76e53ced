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
