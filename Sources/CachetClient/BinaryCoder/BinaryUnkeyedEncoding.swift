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
