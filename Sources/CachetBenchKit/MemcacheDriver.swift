/// memcached's text protocol: `set k 0 0 N\r\n<data>\r\n` answered by `STORED\r\n`, and `get k\r\n`
/// answered by `VALUE k 0 N\r\n<data>\r\nEND\r\n` or `END\r\n` (`get k1 k2 ...` by a `VALUE` block for
/// each key found, then `END`).
public struct MemcacheDriver: BenchProtocolDriver {
    /// Creates a driver.
    public init() {}

    /// `set `, the key, ` 0 0 `, the length, two line ends and the value.
    public func requestLengthBound(keyLength: Int, valueLength: Int) -> Int {
        4 + keyLength + 5 + decimalLength(valueLength) + 2 + valueLength + 2
    }

    /// `get `, the keys each with a space or the line's end.
    public func multiGetLengthBound(keyLength: Int, keyCount: Int) -> Int {
        4 + keyCount * (keyLength + 1) + 1
    }

    /// Writes `get KEY1 KEY2 ...\r\n`.
    public func writeGet(keyCount: Int, key: (Int) -> UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer)
        -> Int
    {
        var offset = put("get", at: destination, 0)
        for index in 0..<keyCount {
            offset = put(" ", at: destination, offset)
            offset = put(key(index), at: destination, offset)
        }
        return put("\r\n", at: destination, offset)
    }

    /// Writes `get KEY\r\n`.
    public func writeGet(key: UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer) -> Int {
        var offset = put("get ", at: destination, 0)
        offset = put(key, at: destination, offset)
        return put("\r\n", at: destination, offset)
    }

    /// Writes `set KEY 0 0 N\r\nVALUE\r\n`.
    public func writeSet(
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        to destination: UnsafeMutableRawPointer
    ) -> Int {
        var offset = put("set ", at: destination, 0)
        offset = put(key, at: destination, offset)
        offset = put(" 0 0 ", at: destination, offset)
        offset = putDecimal(value.count, at: destination, offset)
        offset = put("\r\n", at: destination, offset)
        offset = put(value, at: destination, offset)
        return put("\r\n", at: destination, offset)
    }

    /// Parses `STORED`, `END`, `VALUE key flags bytes` with its data and `END`, or an error line
    /// (`ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...`, `NOT_STORED`, `EXISTS`, `NOT_FOUND`).
    public func parseReply(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws(BenchError) -> (
        reply: BenchReply, end: Int
    )? {
        guard let lineEnd = findLineEnd(buffer, from: offset) else { return nil }
        let length = lineEnd - offset
        if length == 6 && matches(buffer, at: offset, "STORED") { return (.stored, lineEnd + 2) }
        if length == 3 && matches(buffer, at: offset, "END") { return (.miss, lineEnd + 2) }
        if matches(buffer, at: offset, "VALUE ") {
            // VALUE <key> <flags> <bytes> with its data, once per key found, then END.
            var line = offset
            var lineEnd = lineEnd
            var found = 0
            var bytes = 0
            while true {
                // The length is the line's last field.
                var space = lineEnd - 1
                while space > line && buffer[space] != 0x20 { space -= 1 }
                guard space > line + 5, let count = parseDecimal(buffer, (space + 1)..<lineEnd), count >= 0 else {
                    throw BenchError(.malformedReply, "invalid memcached VALUE line '\(excerpt(buffer, from: line))'")
                }
                let dataEnd = lineEnd + 2 + count
                guard buffer.count >= dataEnd + 2 else { return nil }
                guard matches(buffer, at: dataEnd, "\r\n") else {
                    throw BenchError(.malformedReply, "memcached value of \(count) bytes not followed by CRLF")
                }
                found += 1
                bytes += count
                line = dataEnd + 2
                guard let next = findLineEnd(buffer, from: line) else { return nil }
                lineEnd = next
                if lineEnd - line == 3 && matches(buffer, at: line, "END") { break }
                guard matches(buffer, at: line, "VALUE ") else {
                    throw BenchError(.malformedReply, "memcached value not followed by VALUE or END")
                }
            }
            return (found == 1 ? .hit(length: bytes) : .hits(count: found, bytes: bytes), lineEnd + 2)
        }
        if (length == 5 && matches(buffer, at: offset, "ERROR")) || matches(buffer, at: offset, "CLIENT_ERROR")
            || matches(buffer, at: offset, "SERVER_ERROR")
            || (length == 10 && matches(buffer, at: offset, "NOT_STORED"))
            || (length == 6 && matches(buffer, at: offset, "EXISTS"))
            || (length == 9 && matches(buffer, at: offset, "NOT_FOUND"))
        {
            return (.error, lineEnd + 2)
        }
        throw BenchError(.malformedReply, "unexpected memcached reply '\(excerpt(buffer, from: offset))'")
    }
}
