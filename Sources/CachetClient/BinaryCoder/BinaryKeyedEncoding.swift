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
