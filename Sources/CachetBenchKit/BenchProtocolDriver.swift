import CachetWire

/// The outcome of one reply, as the load generator counts it.
public enum BenchReply: Equatable, Sendable {
    /// A write was acknowledged.
    case stored
    /// A read found a value of this many bytes.
    case hit(length: Int)
    /// A read found nothing.
    case miss
    /// The server answered with an error.
    case error
}

/// The wire protocol a load generator speaks: requests appended to a reusable buffer, replies parsed
/// incrementally (a reply may arrive split across reads). Implementations hold no per-request state.
public protocol BenchProtocolDriver: Sendable {
    /// Appends a read of `key`.
    func appendGet(key: [UInt8], to output: inout [UInt8])
    /// Appends a write of `value` under `key`.
    func appendSet(key: [UInt8], value: [UInt8], to output: inout [UInt8])
    /// Parses the reply starting at `offset`.
    /// - Returns: the reply and the offset after it, or nil when it has not fully arrived.
    /// - Throws: ``BenchError`` when the bytes are not a reply of this protocol.
    func parseReply(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws(BenchError) -> (
        reply: BenchReply, end: Int
    )?
}

/// Which protocol to speak.
public enum BenchProtocol: String, Sendable, CaseIterable {
    /// Cachet's binary protocol.
    case cachet
    /// memcached's text protocol (get/set).
    case memcache
    /// Redis' RESP (GET/SET).
    case resp
}

/// Cachet protocol v1: binary frames.
public struct CachetDriver: BenchProtocolDriver {
    /// Creates a driver.
    public init() {}

    /// Appends a GET frame (id 0: replies are matched by order).
    public func appendGet(key: [UInt8], to output: inout [UInt8]) {
        CachetFrameEncoder.appendPrefixAndHeader(
            header: CachetFrameHeader(opcode: .get, word: 0, id: 0),
            bodyLength: 2 + key.count,
            to: &output
        )
        CachetFrameEncoder.appendBigEndian(UInt16(key.count), to: &output)
        output.append(contentsOf: key)
    }

    /// Appends a PUT frame without TTL.
    public func appendSet(key: [UInt8], value: [UInt8], to output: inout [UInt8]) {
        CachetFrameEncoder.appendPrefixAndHeader(
            header: CachetFrameHeader(opcode: .put, word: 0, id: 0),
            bodyLength: 6 + key.count + value.count,
            to: &output
        )
        CachetFrameEncoder.appendBigEndian(UInt32(0), to: &output)
        CachetFrameEncoder.appendBigEndian(UInt16(key.count), to: &output)
        output.append(contentsOf: key)
        output.append(contentsOf: value)
    }

    /// Parses one reply frame.
    public func parseReply(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws(BenchError) -> (
        reply: BenchReply, end: Int
    )? {
        let frame: CachetFrame?
        do {
            frame = try CachetFrameDecoder.decodeFrame(in: buffer, at: offset, maximumPayloadLength: Int(UInt32.max))
        } catch {
            throw BenchError(message: "invalid Cachet reply: \(error.message)")
        }
        guard let frame else { return nil }
        switch frame.header.status {
        case .ok: return (frame.header.opcode == .get ? .hit(length: frame.body.count) : .stored, frame.end)
        case .notFound: return (.miss, frame.end)
        default: return (.error, frame.end)
        }
    }
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

/// Parses a decimal number in `buffer[range]`; nil if it is not one.
@inline(__always)
func parseDecimal(_ buffer: UnsafeRawBufferPointer, _ range: Range<Int>) -> Int? {
    guard !range.isEmpty else { return nil }
    var negative = false
    var value = 0
    for index in range {
        let byte = buffer[index]
        if index == range.lowerBound && byte == UInt8(ascii: "-") {
            negative = true
            continue
        }
        guard byte >= 0x30 && byte <= 0x39 else { return nil }
        value = value * 10 + Int(byte - 0x30)
    }
    return negative ? -value : value
}

@inline(__always)
func appendDecimal(_ value: Int, to output: inout [UInt8]) {
    if value >= 10 { appendDecimal(value / 10, to: &output) }
    output.append(UInt8(0x30 + value % 10))
}

/// memcached's text protocol.
public struct MemcacheDriver: BenchProtocolDriver {
    /// Creates a driver.
    public init() {}

    /// Appends `get KEY\r\n`.
    public func appendGet(key: [UInt8], to output: inout [UInt8]) {
        output.append(contentsOf: [0x67, 0x65, 0x74, 0x20])  // "get "
        output.append(contentsOf: key)
        output.append(contentsOf: [0x0d, 0x0a])
    }

    /// Appends `set KEY 0 0 N\r\nVALUE\r\n`.
    public func appendSet(key: [UInt8], value: [UInt8], to output: inout [UInt8]) {
        output.append(contentsOf: [0x73, 0x65, 0x74, 0x20])  // "set "
        output.append(contentsOf: key)
        output.append(contentsOf: [0x20, 0x30, 0x20, 0x30, 0x20])  // " 0 0 "
        appendDecimal(value.count, to: &output)
        output.append(contentsOf: [0x0d, 0x0a])
        output.append(contentsOf: value)
        output.append(contentsOf: [0x0d, 0x0a])
    }

    /// Parses `STORED`, `END`, `VALUE key flags bytes\r\ndata\r\nEND`, or an error line.
    public func parseReply(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws(BenchError) -> (
        reply: BenchReply, end: Int
    )? {
        guard let lineEnd = findLineEnd(buffer, from: offset) else { return nil }
        let first = buffer[offset]
        let length = lineEnd - offset
        if first == UInt8(ascii: "S") && length == 6 && buffer[offset + 1] == UInt8(ascii: "T") {
            return (.stored, lineEnd + 2)
        }  // STORED
        if first == UInt8(ascii: "E") && length == 3 { return (.miss, lineEnd + 2) }  // END
        if first == UInt8(ascii: "V") && length > 6 {
            // VALUE <key> <flags> <bytes>
            var space = lineEnd - 1
            while space > offset && buffer[space] != 0x20 { space -= 1 }
            guard let length = parseDecimal(buffer, (space + 1)..<lineEnd), length >= 0 else {
                throw BenchError(message: "invalid memcached VALUE line")
            }
            let dataEnd = lineEnd + 2 + length
            guard buffer.count >= dataEnd + 7 else { return nil }  // data \r\n END\r\n
            return (.hit(length: length), dataEnd + 7)
        }
        return (.error, lineEnd + 2)
    }
}

/// Redis' RESP.
public struct RESPDriver: BenchProtocolDriver {
    /// Creates a driver.
    public init() {}

    private func appendBulk(_ bytes: [UInt8], to output: inout [UInt8]) {
        output.append(UInt8(ascii: "$"))
        appendDecimal(bytes.count, to: &output)
        output.append(contentsOf: [0x0d, 0x0a])
        output.append(contentsOf: bytes)
        output.append(contentsOf: [0x0d, 0x0a])
    }

    /// Appends `GET key` as an array of bulk strings.
    public func appendGet(key: [UInt8], to output: inout [UInt8]) {
        output.append(contentsOf: Array("*2\r\n$3\r\nGET\r\n".utf8))
        appendBulk(key, to: &output)
    }

    /// Appends `SET key value` as an array of bulk strings.
    public func appendSet(key: [UInt8], value: [UInt8], to output: inout [UInt8]) {
        output.append(contentsOf: Array("*3\r\n$3\r\nSET\r\n".utf8))
        appendBulk(key, to: &output)
        appendBulk(value, to: &output)
    }

    /// Parses `+OK`, `$N\r\ndata\r\n`, `$-1`, or `-ERR`.
    public func parseReply(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws(BenchError) -> (
        reply: BenchReply, end: Int
    )? {
        guard let lineEnd = findLineEnd(buffer, from: offset) else { return nil }
        switch buffer[offset] {
        case UInt8(ascii: "+"): return (.stored, lineEnd + 2)
        case UInt8(ascii: "-"): return (.error, lineEnd + 2)
        case UInt8(ascii: "$"):
            guard let length = parseDecimal(buffer, (offset + 1)..<lineEnd) else {
                throw BenchError(message: "invalid RESP bulk length")
            }
            if length < 0 { return (.miss, lineEnd + 2) }
            let end = lineEnd + 2 + length + 2
            guard buffer.count >= end else { return nil }
            return (.hit(length: length), end)
        default:
            throw BenchError(message: "unexpected RESP reply type 0x\(String(buffer[offset], radix: 16))")
        }
    }
}

/// An error of the load generator.
public struct BenchError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public var message: String
    /// Creates an error.
    /// - Parameter message: what went wrong.
    public init(message: String) { self.message = message }
    /// The message.
    public var description: String { message }
}
