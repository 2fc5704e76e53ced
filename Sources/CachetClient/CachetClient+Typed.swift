import CachetLocking

/// Typed values: the app's own `Codable` types in and out, through the client's ``CachetCoder``, and keys
/// of any `CustomStringConvertible` type (their `description`'s UTF-8) or bytes. `[UInt8]` and `String`
/// values are stored as their bytes whatever the coder, as the raw calls store them (an integer array
/// literal is `[Int]`, a typed value: write `[UInt8]` for bytes).
extension CachetClient {
    /// Stores `value`, encoded by the client's ``coder``, under `key`.
    ///
    /// ```swift
    /// try await client.put("user:42", value: user, ttl: .seconds(60))   // User: Codable & Sendable
    /// ```
    /// - Parameters:
    ///   - key: anything whose `description` is 1 to 4096 bytes of UTF-8.
    ///   - value: the value.
    ///   - ttl: how long the entry lives; nil for no expiry.
    /// - Throws: ``CachetClientError``: `encodingFailed` when the coder refuses the value (nothing is
    ///   sent), else as ``put(_:value:ttl:)-(String,_,_)``.
    // Disfavored: a call the raw `put` overloads also accept (an array literal of bytes) stays raw.
    @_disfavoredOverload
    public func put<Value: Encodable & Sendable>(
        _ key: some CustomStringConvertible,
        value: Value,
        ttl: Duration? = nil
    ) async throws(CachetClientError) {
        let key = key.description
        try await put(key: key.utf8, value: try encoded(value, for: key), ttl: ttl)
    }

    /// Stores `value`, encoded by the client's ``coder``, under the key of bytes `key`.
    @_disfavoredOverload
    public func put<Value: Encodable & Sendable>(
        _ key: [UInt8],
        value: Value,
        ttl: Duration? = nil
    ) async throws(CachetClientError) {
        try await put(key: key, value: try encoded(value, for: Self.describe(key)), ttl: ttl)
    }

    /// The value under `key`, decoded by the client's ``coder`` as `type`.
    ///
    /// ```swift
    /// let user = try await client.get("user:42", as: User.self)   // nil on a miss
    /// ```
    /// - Parameters:
    ///   - key: anything whose `description` is 1 to 4096 bytes of UTF-8.
    ///   - type: the type to decode.
    /// - Returns: the value, or nil when the key is not stored.
    /// - Throws: ``CachetClientError``: `decodingFailed` naming the key and the type when the stored bytes
    ///   are not a `type` (never a crash), else as ``get(_:)-(String)``.
    public func get<Value: Decodable>(
        _ key: some CustomStringConvertible,
        as type: Value.Type
    ) async throws(CachetClientError) -> Value? {
        let key = key.description
        guard let bytes = try await get(key: key.utf8) else { return nil }
        return try decoded(type, from: bytes, for: key)
    }

    /// The value under the key of bytes `key`, decoded by the client's ``coder`` as `type`.
    public func get<Value: Decodable>(_ key: [UInt8], as type: Value.Type) async throws(CachetClientError) -> Value? {
        guard let bytes = try await get(key: key) else { return nil }
        return try decoded(type, from: bytes, for: Self.describe(key))
    }

    /// The bytes a typed ``put(_:value:ttl:)-(_,Value,_)`` stores for `value`: the client's ``coder``'s
    /// encoding, except that `[UInt8]` and `String` values are their bytes (UTF-8), as the raw calls store
    /// them. For drivers that add their own framing around a value.
    /// - Parameters:
    ///   - value: the value.
    ///   - key: the key it is for, named in the error.
    /// - Returns: the bytes.
    /// - Throws: ``CachetClientError`` `encodingFailed`, naming the key and the type.
    public func encoded<Value: Encodable>(_ value: Value, for key: String) throws(CachetClientError) -> [UInt8] {
        if let bytes = value as? [UInt8] { return bytes }
        if let text = value as? String { return Array(text.utf8) }
        do {
            return try coder.encode(value)
        } catch {
            throw CachetClientError(
                code: .encodingFailed,
                message: "the value for '\(key)' (\(Value.self)) does not encode with \(type(of: coder)): \(error)",
                underlying: error
            )
        }
    }

    /// The `type` that a typed ``get(_:as:)-(_,Value.Type)`` reads from `bytes`: the inverse of
    /// ``encoded(_:for:)``.
    /// - Parameters:
    ///   - type: the type.
    ///   - bytes: the stored bytes.
    ///   - key: the key they are under, named in the error.
    /// - Returns: the value.
    /// - Throws: ``CachetClientError`` `decodingFailed`, naming the key and the type.
    public func decoded<Value: Decodable>(
        _ type: Value.Type,
        from bytes: [UInt8],
        for key: String
    ) throws(CachetClientError) -> Value {
        if let raw = bytes as? Value { return raw }
        if Value.self == String.self, let text = String(decoding: bytes, as: UTF8.self) as? Value { return text }
        do {
            return try coder.decode(type, from: bytes)
        } catch {
            throw CachetClientError(
                code: .decodingFailed,
                message:
                    "the \(bytes.count) bytes under '\(key)' do not decode as \(Value.self) with \(Swift.type(of: coder)): "
                    + "\(error)",
                underlying: error
            )
        }
    }

    /// A key of bytes for messages: its UTF-8 when it is, else hex.
    static func describe(_ key: [UInt8]) -> String {
        if let text = String(validating: key, as: UTF8.self), text.unicodeScalars.allSatisfy({ $0.value >= 0x20 }) {
            return text
        }
        return "0x" + key.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}
