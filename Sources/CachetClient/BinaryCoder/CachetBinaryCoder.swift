/// A compact binary format for Swift consumers: no text to print or parse, small integers in a byte or
/// two, field names once per value so that types can evolve. On typical app records it encodes and decodes
/// several times as fast as ``CachetJSONCoder`` (measured by `cachet-bench --coders`: BENCHMARKS.md,
/// "Typed values").
///
/// The format, byte by byte (every value is a *slot*):
/// - A slot starts with an unsigned LEB128 header: 1 is nil; 2 is a *structure* (below) after its length
///   in 4 bytes little-endian; 3 is a structure without its length (a nested container, found by reading
///   it); 4 or more is a primitive: the number minus 4 is its byte count times 8 plus its kind. (0 ends a
///   container's list of slots.)
/// - Primitives, by kind: 0 a signed integer, zigzag LEB128; 1 an unsigned one, LEB128; 2 `Double` or
///   `Date` (seconds since 1970), the IEEE value's 8 bytes; 3 `Float`, 4 bytes; 4 `Bool`, one byte 0 or
///   1; 5 `String`, its UTF-8; 6 `Data` or `[UInt8]`, the bytes. Little-endian throughout. A value read as
///   another kind is a type mismatch (a signed and an unsigned integer read as each other when they fit).
/// - A structure is a tag, then: `K` (keyed) fields, each a key length (1 to 255), the key's UTF-8 and
///   the field's slot, ended by a 0 byte; `U` (unkeyed) slots ended by a 0 header; `S` (single value) one
///   slot.
///
/// Fields are found by name, in order first (a synthesized `Codable` reads them in one pass): a field
/// added to a type as an optional still reads values written before it. Values are written in one pass,
/// so a nested container must be filled before its parent container is written to again (as synthesized
/// `Codable` and ordinary hand-written code do); otherwise encoding fails with an error saying so. The
/// format does not change within a major version of CachetClient.
public struct CachetBinaryCoder: CachetCoder {
    /// A binary coder.
    public init() {}

    /// The value's bytes.
    public func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        let output = BinaryOutput()
        try output.encodeSlot(value, path: BinaryPath())
        if let failure = output.failure { throw failure }
        return output.bytes
    }

    /// A value read from its bytes.
    public func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        try bytes.withUnsafeBytes { raw in
            let input = BinaryInput(raw: raw)
            var offset = 0
            let slot = try input.slot(at: &offset, codingPath: [])
            guard offset == raw.count else { throw input.corrupt([], "\(raw.count - offset) bytes after the value") }
            return try input.decode(type, slot, path: BinaryPath())
        }
    }
}
