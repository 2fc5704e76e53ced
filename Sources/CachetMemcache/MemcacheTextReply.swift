/// The replies of memcached's text protocol (memcached's `protocol.txt`), written as memcached writes them.
public enum MemcacheTextReply {
    /// A storage command's value was stored.
    public static let stored = Array("STORED\r\n".utf8)
    /// `add` of a key that holds a value, `replace`/`append`/`prepend` of one that does not.
    public static let notStored = Array("NOT_STORED\r\n".utf8)
    /// `cas` of a value changed since the client read it.
    public static let exists = Array("EXISTS\r\n".utf8)
    /// `cas`, `delete`, `incr`, `decr` or `touch` of a key with no value.
    public static let notFound = Array("NOT_FOUND\r\n".utf8)
    /// `delete` removed a value.
    public static let deleted = Array("DELETED\r\n".utf8)
    /// `touch` changed an expiry.
    public static let touched = Array("TOUCHED\r\n".utf8)
    /// `flush_all`, `verbosity`.
    public static let ok = Array("OK\r\n".utf8)
    /// The end of a retrieval's values, or of `stats`.
    public static let end = Array("END\r\n".utf8)

    /// One value of a retrieval: `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
    public static func appendValue(
        key: UnsafeRawBufferPointer,
        flags: UInt32,
        data: UnsafeRawBufferPointer,
        cas: UInt64?,
        to output: inout [UInt8]
    ) {
        output.append(contentsOf: "VALUE ".utf8)
        output.append(contentsOf: key)
        output.append(contentsOf: " \(flags) \(data.count)".utf8)
        if let cas { output.append(contentsOf: " \(cas)".utf8) }
        output.append(contentsOf: "\r\n".utf8)
        output.append(contentsOf: data)
        output.append(contentsOf: "\r\n".utf8)
    }

    /// The value after `incr` or `decr`: its decimal digits.
    public static func number(_ value: UInt64) -> [UInt8] {
        Array("\(value)\r\n".utf8)
    }

    /// `VERSION <version>`.
    public static func version(_ version: String) -> [UInt8] {
        Array("VERSION \(version)\r\n".utf8)
    }

    /// One line of `stats`: `STAT <name> <value>`.
    public static func stat(_ name: String, _ value: String) -> [UInt8] {
        Array("STAT \(name) \(value)\r\n".utf8)
    }

    /// The value `incr` or `decr` leaves, by memcached's rules: `incr` wraps around at 2^64, `decr` stops
    /// at 0.
    public static func arithmetic(_ current: UInt64, delta: UInt64, increment: Bool) -> UInt64 {
        increment ? current &+ delta : (delta > current ? 0 : current - delta)
    }
}
