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
