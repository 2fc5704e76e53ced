/// Redis' RESP: `SET key value` answered by `+OK`, `GET key` answered by a bulk string or `$-1`.
public struct RESPDriver: BenchProtocolDriver {
    /// Creates a driver.
    public init() {}

    /// The array header, the command, and the key and value as bulk strings.
    public func requestLengthBound(keyLength: Int, valueLength: Int) -> Int {
        13 + 1 + decimalLength(keyLength) + 2 + keyLength + 2 + 1 + decimalLength(valueLength) + 2 + valueLength + 2
    }

    @inline(__always)
    private func putBulk(_ bytes: UnsafeRawBufferPointer, at destination: UnsafeMutableRawPointer, _ offset: Int)
        -> Int
    {
        var offset = put("$", at: destination, offset)
        offset = putDecimal(bytes.count, at: destination, offset)
        offset = put("\r\n", at: destination, offset)
        offset = put(bytes, at: destination, offset)
        return put("\r\n", at: destination, offset)
    }

    /// Writes `GET key` as an array of bulk strings.
    public func writeGet(key: UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer) -> Int {
        putBulk(key, at: destination, put("*2\r\n$3\r\nGET\r\n", at: destination, 0))
    }

    /// Writes `SET key value` as an array of bulk strings.
    public func writeSet(
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        to destination: UnsafeMutableRawPointer
    ) -> Int {
        let offset = putBulk(key, at: destination, put("*3\r\n$3\r\nSET\r\n", at: destination, 0))
        return putBulk(value, at: destination, offset)
    }

    /// Parses `+OK`, `$N` with its data, `$-1`, or an error (`-...`).
    public func parseReply(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws(BenchError) -> (
        reply: BenchReply, end: Int
    )? {
        guard let lineEnd = findLineEnd(buffer, from: offset) else { return nil }
        switch buffer[offset] {
        case UInt8(ascii: "+"):
            guard lineEnd - offset == 3 && matches(buffer, at: offset, "+OK") else {
                throw BenchError(.malformedReply, "unexpected RESP status '\(excerpt(buffer, from: offset))'")
            }
            return (.stored, lineEnd + 2)
        case UInt8(ascii: "-"):
            return (.error, lineEnd + 2)
        case UInt8(ascii: "$"):
            guard let count = parseDecimal(buffer, (offset + 1)..<lineEnd), count >= -1 else {
                throw BenchError(.malformedReply, "invalid RESP bulk length '\(excerpt(buffer, from: offset))'")
            }
            if count == -1 { return (.miss, lineEnd + 2) }
            let dataEnd = lineEnd + 2 + count
            guard buffer.count >= dataEnd + 2 else { return nil }
            guard buffer[dataEnd] == 0x0d && buffer[dataEnd + 1] == 0x0a else {
                throw BenchError(.malformedReply, "RESP bulk string of \(count) bytes not followed by CRLF")
            }
            return (.hit(length: count), dataEnd + 2)
        default:
            throw BenchError(.malformedReply, "unexpected RESP reply '\(excerpt(buffer, from: offset))'")
        }
    }
}
