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
