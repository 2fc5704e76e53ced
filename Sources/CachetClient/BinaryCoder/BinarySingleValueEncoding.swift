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
