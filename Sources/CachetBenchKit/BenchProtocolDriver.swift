/// The outcome of one reply, as the load generator counts it.
public enum BenchReply: Hashable, Sendable {
    /// A write was acknowledged.
    case stored
    /// A read found a value of this many bytes.
    case hit(length: Int)
    /// A read of several keys found `count` of them (2 or more), `bytes` bytes of values in all.
    case hits(count: Int, bytes: Int)
    /// A read found nothing.
    case miss
    /// The server answered with an error.
    case error
}

/// The wire protocol a load generator speaks.
///
/// Requests are written into memory the caller provides (at least ``requestLengthBound(keyLength:valueLength:)``
/// bytes), so that the hot path neither allocates nor retains. Replies are parsed incrementally with the
/// single-step contract of the codecs: `nil` means the reply has not fully arrived (nothing is consumed),
/// a thrown error means the stream cannot be trusted. Implementations hold no per-request state, and
/// the load generator uses them generically, never as existentials.
public protocol BenchProtocolDriver: Sendable {
    /// The most bytes a GET or SET of these lengths takes.
    /// - Parameters:
    ///   - keyLength: bytes of the key.
    ///   - valueLength: bytes of the value.
    /// - Returns: an upper bound of the request's length.
    func requestLengthBound(keyLength: Int, valueLength: Int) -> Int

    /// Writes a read of `key`.
    /// - Parameters:
    ///   - key: the key.
    ///   - destination: where to write; has room for ``requestLengthBound(keyLength:valueLength:)`` bytes.
    /// - Returns: the bytes written.
    func writeGet(key: UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer) -> Int

    /// Writes a write of `value` under `key`.
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    ///   - destination: where to write; has room for ``requestLengthBound(keyLength:valueLength:)`` bytes.
    /// - Returns: the bytes written.
    func writeSet(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer)
        -> Int

    /// The most bytes a read of `keyCount` keys of `keyLength` bytes takes.
    func multiGetLengthBound(keyLength: Int, keyCount: Int) -> Int

    /// Writes one read of `keyCount` keys, `key(i)` giving the i-th (valid until the next call); only
    /// protocols with a read of several keys take more than one.
    /// - Returns: the bytes written.
    func writeGet(keyCount: Int, key: (Int) -> UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer) -> Int

    /// Parses the reply starting at `offset`.
    /// - Parameters:
    ///   - buffer: the bytes received so far.
    ///   - offset: where the reply starts.
    /// - Returns: the reply and the offset after it, or nil when it has not fully arrived.
    /// - Throws: ``BenchError`` with code `malformedReply` when the bytes are not a reply of this protocol.
    func parseReply(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws(BenchError) -> (
        reply: BenchReply, end: Int
    )?
}

extension BenchProtocolDriver {
    /// One key's read: a protocol without reads of several keys.
    public func multiGetLengthBound(keyLength: Int, keyCount: Int) -> Int {
        requestLengthBound(keyLength: keyLength, valueLength: 0)
    }

    /// A plain read of `key(0)`: a protocol without reads of several keys
    /// (``BenchConfiguration/validate()`` allows more than one only with memcached's).
    public func writeGet(keyCount: Int, key: (Int) -> UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer)
        -> Int
    {
        precondition(keyCount == 1, "this protocol reads one key at a time")
        return writeGet(key: key(0), to: destination)
    }

    /// A GET request as bytes (for tests and tools; the load loop writes in place).
    /// - Parameter key: the key.
    /// - Returns: the request.
    public func getRequest(key: [UInt8]) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: requestLengthBound(keyLength: key.count, valueLength: 0)) {
            buffer,
            count in
            count = key.withUnsafeBytes { writeGet(key: $0, to: UnsafeMutableRawPointer(buffer.baseAddress!)) }
        }
    }

    /// A SET request as bytes (for tests and tools; the load loop writes in place).
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    /// - Returns: the request.
    public func setRequest(key: [UInt8], value: [UInt8]) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: requestLengthBound(keyLength: key.count, valueLength: value.count)) {
            buffer,
            count in
            count = key.withUnsafeBytes { key in
                value.withUnsafeBytes { value in
                    writeSet(key: key, value: value, to: UnsafeMutableRawPointer(buffer.baseAddress!))
                }
            }
        }
    }
}

/// Which protocol to speak.
public enum BenchProtocol: String, Sendable, CaseIterable {
    /// Cachet's binary protocol (`Protocol/PROTOCOL.md`).
    case cachet
    /// memcached's text protocol (get/set).
    case memcache
    /// Redis' RESP (GET/SET).
    case resp

    /// The server's usual port.
    public var defaultPort: Int {
        switch self {
        case .cachet: return 7420
        case .memcache: return 11211
        case .resp: return 6379
        }
    }
}

// MARK: - Helpers shared by the text protocols

/// Copies `bytes` to `destination + offset`; returns the offset after them. Short copies (keys, line
/// ends) are byte loops the compiler inlines: a call to `memmove` per piece cost more than the copy.
@inline(__always)
func put(_ bytes: UnsafeRawBufferPointer, at destination: UnsafeMutableRawPointer, _ offset: Int) -> Int {
    if bytes.count > 32 {
        (destination + offset).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
    } else {
        for index in 0..<bytes.count {
            destination.storeBytes(of: bytes[index], toByteOffset: offset + index, as: UInt8.self)
        }
    }
    return offset + bytes.count
}

/// Writes the ASCII of a static string; returns the offset after it.
@inline(__always)
func put(_ text: StaticString, at destination: UnsafeMutableRawPointer, _ offset: Int) -> Int {
    put(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount), at: destination, offset)
}

/// Writes `value` (not negative) in decimal; returns the offset after it.
@inline(__always)
func putDecimal(_ value: Int, at destination: UnsafeMutableRawPointer, _ offset: Int) -> Int {
    var digits = 1
    var rest = value / 10
    while rest > 0 {
        digits += 1
        rest /= 10
    }
    var remaining = value
    var index = offset + digits - 1
    while index >= offset {
        destination.storeBytes(of: UInt8(0x30 + remaining % 10), toByteOffset: index, as: UInt8.self)
        remaining /= 10
        index -= 1
    }
    return offset + digits
}

/// Decimal digits of `value` (not negative).
@inline(__always)
func decimalLength(_ value: Int) -> Int {
    var digits = 1
    var rest = value / 10
    while rest > 0 {
        digits += 1
        rest /= 10
    }
    return digits
}

/// Finds `\r\n` at or after `from`; returns the index of `\r`.
@inline(__always)
func findLineEnd(_ buffer: UnsafeRawBufferPointer, from: Int) -> Int? {
    var index = from
    while index + 1 < buffer.count {
        if buffer[index] == 0x0d && buffer[index + 1] == 0x0a { return index }
        index += 1
    }
    return nil
}

/// Whether `buffer[offset...]` starts with `text`.
@inline(__always)
func matches(_ buffer: UnsafeRawBufferPointer, at offset: Int, _ text: StaticString) -> Bool {
    let count = text.utf8CodeUnitCount
    guard offset + count <= buffer.count else { return false }
    for index in 0..<count where buffer[offset + index] != text.utf8Start[index] { return false }
    return true
}

/// Parses a decimal number in `buffer[range]` with an optional leading `-`; nil if it is not one or
/// has more than 18 digits.
@inline(__always)
func parseDecimal(_ buffer: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int? {
    var start = range.lowerBound
    let negative = start < range.upperBound && buffer[start] == UInt8(ascii: "-")
    if negative { start += 1 }
    guard start < range.upperBound && range.upperBound - start <= 18 else { return nil }
    var value = 0
    for index in start..<range.upperBound {
        let byte = buffer[index]
        guard byte >= 0x30 && byte <= 0x39 else { return nil }
        value = value * 10 + Int(byte - 0x30)
    }
    return negative ? -value : value
}

/// The first bytes of a line, printable, for error messages.
func excerpt(_ buffer: UnsafeRawBufferPointer, from offset: Int) -> String {
    let end = min(buffer.count, offset + 40)
    var text = ""
    for index in offset..<end {
        let byte = buffer[index]
        if byte == 0x0d || byte == 0x0a { break }
        text.unicodeScalars.append(byte >= 0x20 && byte < 0x7f ? Unicode.Scalar(byte) : "?")
    }
    return text
}
