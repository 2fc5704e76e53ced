/// A PUT body located in a buffer.
public struct CachetPutBody: Hashable, Sendable {
    /// Seconds the entry lives; 0 means no expiry.
    public var ttl: UInt32
    /// Offsets of the key in the buffer.
    public var key: Range<Int>
    /// Offsets of the value in the buffer (may be empty).
    public var value: Range<Int>

    /// Creates a PUT body description.
    /// - Parameters:
    ///   - ttl: seconds to live, 0 for none.
    ///   - key: the key's offsets.
    ///   - value: the value's offsets.
    @inlinable
    public init(ttl: UInt32, key: Range<Int>, value: Range<Int>) {
        self.ttl = ttl
        self.key = key
        self.value = value
    }
}

/// Parses request bodies. Pure: the results are offsets into the caller's buffer.
///
/// Body layouts are in `Protocol/PROTOCOL.md`, "Request bodies".
public enum CachetBodyDecoder {
    /// Parses a PUT body: `ttl: u32 | key_len: u16 | key | value`.
    ///
    /// - Parameters:
    ///   - buffer: the buffer the frame was decoded from.
    ///   - body: the frame's body range.
    /// - Returns: the TTL, key and value.
    /// - Throws: ``CachetWireError`` `malformedBody` when the body is shorter than its declared key,
    ///   `emptyKey`, or `keyTooLong`.
    @inlinable
    public static func decodePut(
        in buffer: UnsafeRawBufferPointer,
        body: Range<Int>
    ) throws(CachetWireError) -> CachetPutBody {
        guard body.count >= CachetProtocol.putBodyPrefixSize else {
            throw malformed("PUT body of \(body.count) bytes is shorter than its 6-byte ttl and key length")
        }
        let ttl = buffer.loadUnaligned(fromByteOffset: body.lowerBound, as: UInt32.self).bigEndian
        let keyLength = Int(buffer.loadUnaligned(fromByteOffset: body.lowerBound + 4, as: UInt16.self).bigEndian)
        let keyStart = body.lowerBound + CachetProtocol.putBodyPrefixSize
        try checkKeyLength(keyLength, available: body.upperBound - keyStart, opcode: "PUT")
        return CachetPutBody(
            ttl: ttl,
            key: keyStart..<(keyStart + keyLength),
            value: (keyStart + keyLength)..<body.upperBound
        )
    }

    /// Parses a PUT body, after the 8-byte lease token when the request carries the `lease` flag
    /// (`token: u64 | ttl: u32 | key_len: u16 | key | value`).
    ///
    /// - Parameters:
    ///   - buffer: the buffer the frame was decoded from.
    ///   - body: the frame's body range.
    ///   - leased: whether the request has the ``CachetRequestFlags/lease`` flag.
    /// - Returns: the PUT body, and the token (0 without the flag).
    /// - Throws: ``CachetWireError`` as ``decodePut(in:body:)``, and `malformedBody` for a leased body
    ///   shorter than its token.
    @inlinable
    public static func decodePut(
        in buffer: UnsafeRawBufferPointer,
        body: Range<Int>,
        leased: Bool
    ) throws(CachetWireError) -> (put: CachetPutBody, token: UInt64) {
        guard leased else { return (try decodePut(in: buffer, body: body), 0) }
        guard body.count >= 8 else {
            throw malformed("leased PUT body of \(body.count) bytes is shorter than its 8-byte token")
        }
        let token = buffer.loadUnaligned(fromByteOffset: body.lowerBound, as: UInt64.self).bigEndian
        return (try decodePut(in: buffer, body: (body.lowerBound + 8)..<body.upperBound), token)
    }

    /// Parses a GET or DEL body: `key_len: u16 | key`, with nothing after the key.
    ///
    /// - Parameters:
    ///   - buffer: the buffer the frame was decoded from.
    ///   - body: the frame's body range.
    /// - Returns: the key's offsets.
    /// - Throws: ``CachetWireError`` `malformedBody` when the body length is not exactly 2 + key length,
    ///   `emptyKey`, or `keyTooLong`.
    @inlinable
    public static func decodeKey(
        in buffer: UnsafeRawBufferPointer,
        body: Range<Int>
    ) throws(CachetWireError) -> Range<Int> {
        guard body.count >= CachetProtocol.keyBodyPrefixSize else {
            throw malformed("key body of \(body.count) bytes is shorter than its 2-byte key length")
        }
        let keyLength = Int(buffer.loadUnaligned(fromByteOffset: body.lowerBound, as: UInt16.self).bigEndian)
        let keyStart = body.lowerBound + CachetProtocol.keyBodyPrefixSize
        try checkKeyLength(keyLength, available: body.upperBound - keyStart, opcode: "key")
        guard keyStart + keyLength == body.upperBound else {
            throw malformed(
                "key body declares a \(keyLength)-byte key but carries \(body.upperBound - keyStart) bytes after its length"
            )
        }
        return keyStart..<(keyStart + keyLength)
    }

    /// Parses the body of a GET with the ``CachetRequestFlags/range`` flag: `key_len: u16 | key | offset: u64 |
    /// length: u64` (`Protocol/PROTOCOL.md`, "GET of a range"), ending exactly there.
    ///
    /// - Parameters:
    ///   - buffer: the buffer the frame was decoded from.
    ///   - body: the body's range in `buffer`.
    /// - Returns: the key's range in `buffer`, and the range of the value asked for.
    /// - Throws: ``CachetWireError`` as ``decodeKey(in:body:)``, and `malformedBody` when the 16 range bytes
    ///   do not follow the key exactly.
    public static func decodeRangedKey(
        in buffer: UnsafeRawBufferPointer,
        body: Range<Int>
    ) throws(CachetWireError) -> (key: Range<Int>, range: CachetValueRange) {
        guard body.count >= CachetProtocol.keyBodyPrefixSize + CachetValueRange.encodedSize else {
            throw malformed(
                "GET of a range: body of \(body.count) bytes is shorter than a key length and a 16-byte range"
            )
        }
        let keyBody = body.lowerBound..<(body.upperBound - CachetValueRange.encodedSize)
        let key: Range<Int>
        do {
            key = try decodeKey(in: buffer, body: keyBody)
        } catch {
            guard error.code == .malformedBody else { throw error }
            throw malformed("GET of a range: \(error.message), and then 16 bytes of range")
        }
        let offset = buffer.loadUnaligned(fromByteOffset: keyBody.upperBound, as: UInt64.self).bigEndian
        let length = buffer.loadUnaligned(fromByteOffset: keyBody.upperBound + 8, as: UInt64.self).bigEndian
        return (key, CachetValueRange(offset: offset, length: length))
    }

    /// Parses an AUTH body: `user_len: u16 | user | secret`, the user 1 to 255 bytes, the secret at most
    /// 1024.
    ///
    /// - Parameters:
    ///   - buffer: the buffer the frame was decoded from.
    ///   - body: the frame's body range.
    /// - Returns: the user's and the secret's offsets.
    /// - Throws: ``CachetWireError`` `malformedBody` for a body shorter than its declared user, an empty or
    ///   longer user, or a longer secret.
    public static func decodeAuth(
        in buffer: UnsafeRawBufferPointer,
        body: Range<Int>
    ) throws(CachetWireError) -> (user: Range<Int>, secret: Range<Int>) {
        guard body.count >= 2 else {
            throw malformed("AUTH body of \(body.count) bytes is shorter than its 2-byte user length")
        }
        let userLength = Int(buffer.loadUnaligned(fromByteOffset: body.lowerBound, as: UInt16.self).bigEndian)
        let userStart = body.lowerBound + 2
        guard userLength >= 1 && userLength <= 255 else {
            throw malformed("AUTH user of \(userLength) bytes: a user is 1 to 255 bytes")
        }
        guard userStart + userLength <= body.upperBound else {
            throw malformed(
                "AUTH body declares a \(userLength)-byte user but carries \(body.upperBound - userStart) bytes"
            )
        }
        let secret = (userStart + userLength)..<body.upperBound
        guard secret.count <= 1024 else {
            throw malformed("AUTH secret of \(secret.count) bytes: a secret is at most 1024 bytes")
        }
        return (userStart..<(userStart + userLength), secret)
    }

    /// The most key prefixes one CLEAR may name.
    public static let maximumClearPrefixes = 64

    /// Parses a CLEAR body: empty (every key), or one or more `prefix_len: u16 | prefix` pairs, each prefix
    /// 1 to ``CachetProtocol/maximumKeyLength`` bytes, at most ``maximumClearPrefixes`` of them: only keys
    /// that start with one of them are removed. Not on the hot path: it copies the prefixes.
    ///
    /// - Parameters:
    ///   - buffer: the buffer the frame was decoded from.
    ///   - body: the frame's body range.
    /// - Returns: the prefixes, empty for a CLEAR of every key.
    /// - Throws: ``CachetWireError`` `malformedBody` for a truncated pair, an empty or too long prefix, or
    ///   too many prefixes.
    public static func decodeClear(
        in buffer: UnsafeRawBufferPointer,
        body: Range<Int>
    ) throws(CachetWireError) -> [[UInt8]] {
        var prefixes: [[UInt8]] = []
        var offset = body.lowerBound
        while offset < body.upperBound {
            guard prefixes.count < maximumClearPrefixes else {
                throw malformed("CLEAR names more than \(maximumClearPrefixes) key prefixes")
            }
            guard body.upperBound - offset >= 2 else {
                throw malformed("CLEAR body ends inside a 2-byte prefix length")
            }
            let length = Int(buffer.loadUnaligned(fromByteOffset: offset, as: UInt16.self).bigEndian)
            guard length >= 1 && length <= CachetProtocol.maximumKeyLength else {
                throw malformed(
                    "CLEAR prefix of \(length) bytes: a prefix is 1 to \(CachetProtocol.maximumKeyLength) bytes"
                )
            }
            guard offset + 2 + length <= body.upperBound else {
                throw malformed(
                    "CLEAR body declares a \(length)-byte prefix but carries \(body.upperBound - offset - 2) bytes"
                )
            }
            prefixes.append(Array(buffer[(offset + 2)..<(offset + 2 + length)]))
            offset += 2 + length
        }
        return prefixes
    }

    /// Checks that a CLEAR, STATS or PING body is empty.
    ///
    /// - Parameter body: the frame's body range.
    /// - Throws: ``CachetWireError`` `malformedBody` when the body is not empty.
    @inlinable
    public static func decodeEmpty(body: Range<Int>) throws(CachetWireError) {
        guard body.isEmpty else {
            throw malformed("this opcode takes an empty body, got \(body.count) bytes")
        }
    }

    @inlinable
    static func checkKeyLength(_ keyLength: Int, available: Int, opcode: String) throws(CachetWireError) {
        guard keyLength > 0 else {
            throw CachetWireError(
                code: .emptyKey,
                message: "empty key: keys are 1 to \(CachetProtocol.maximumKeyLength) bytes"
            )
        }
        guard keyLength <= CachetProtocol.maximumKeyLength else {
            throw CachetWireError(
                code: .keyTooLong,
                message: "key of \(keyLength) bytes exceeds the \(CachetProtocol.maximumKeyLength)-byte limit"
            )
        }
        guard keyLength <= available else {
            throw malformed("\(opcode) body declares a \(keyLength)-byte key but only \(available) bytes follow")
        }
    }

    @usableFromInline
    static func malformed(_ message: String) -> CachetWireError {
        CachetWireError(code: .malformedBody, message: message)
    }
}
