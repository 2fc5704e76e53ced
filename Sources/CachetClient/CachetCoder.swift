#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Turns an app's values into the bytes a node stores, and back: what ``CachetClient``'s typed calls
/// (`put(_:value:ttl:)` with an `Encodable` value, `get(_:as:)`) use, set by
/// ``CachetClient/Configuration/coder``.
///
/// Every consumer of a key must read it with the coder that wrote it: the bytes carry no mark of their
/// format. ``CachetJSONCoder`` (the default) is readable by any language; ``CachetBinaryCoder`` is smaller
/// and faster for Swift consumers (`BENCHMARKS.md`, "Typed values").
public protocol CachetCoder: Sendable {
    /// The bytes of `value`.
    /// - Throws: when the value cannot be encoded (the error the type or format reports).
    func encode<Value: Encodable>(_ value: Value) throws -> [UInt8]

    /// A value of `type` from `bytes`.
    /// - Throws: when the bytes are not a `type` in this format.
    func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value
}

/// JSON through Foundation's `JSONEncoder` and `JSONDecoder` (dates as seconds since 1970, data as
/// Base64): the default coder, readable by consumers in any language.
public struct CachetJSONCoder: CachetCoder {
    /// A JSON coder.
    public init() {}

    /// The value as JSON.
    public func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .secondsSince1970
        return Array(try encoder.encode(value))
    }

    /// A value read from JSON.
    public func decode<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws -> Value {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return try decoder.decode(type, from: Data(bytes))
    }
}
