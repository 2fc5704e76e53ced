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
        var line = [UInt8](repeating: 0, count: valueLineCapacity(keyLength: key.count))
        let count = line.withUnsafeMutableBytes {
            writeValueLine(key: key, flags: flags, length: data.count, cas: cas, to: $0.baseAddress!)
        }
        output.append(contentsOf: line[0..<count])
        output.append(contentsOf: data)
        output.append(contentsOf: "\r\n".utf8)
    }

    /// The most bytes ``writeValueLine(key:flags:length:cas:to:)`` writes for a key of `keyLength` bytes.
    public static func valueLineCapacity(keyLength: Int) -> Int {
        6 + keyLength + 11 + 21 + 21 + 2
    }

    /// Writes a retrieval's `VALUE <key> <flags> <bytes>[ <cas>]\r\n` line at `out` (room for
    /// ``valueLineCapacity(keyLength:)`` bytes), without making a string; returns the bytes written.
    public static func writeValueLine(
        key: UnsafeRawBufferPointer,
        flags: UInt32,
        length: Int,
        cas: UInt64?,
        to out: UnsafeMutableRawPointer
    ) -> Int {
        // "VALUE " in two stores.
        out.storeBytes(of: UInt32(littleEndian: 0x554C_4156), as: UInt32.self)
        out.storeBytes(of: UInt16(littleEndian: 0x2045), toByteOffset: 4, as: UInt16.self)
        var at = 6
        if key.count > 0 { (out + at).copyMemory(from: key.baseAddress!, byteCount: key.count) }
        at += key.count
        out.storeBytes(of: UInt8(ascii: " "), toByteOffset: at, as: UInt8.self)
        at += 1 + writeDecimal(UInt64(flags), to: out + at + 1)
        out.storeBytes(of: UInt8(ascii: " "), toByteOffset: at, as: UInt8.self)
        at += 1 + writeDecimal(UInt64(length), to: out + at + 1)
        if let cas {
            out.storeBytes(of: UInt8(ascii: " "), toByteOffset: at, as: UInt8.self)
            at += 1 + writeDecimal(cas, to: out + at + 1)
        }
        out.storeBytes(of: 13, toByteOffset: at, as: UInt8.self)
        out.storeBytes(of: 10, toByteOffset: at + 1, as: UInt8.self)
        return at + 2
    }

    /// Writes `value`'s decimal digits at `out` (room for 20 bytes); returns how many. The digits are
    /// counted by comparison and written two at a time from a table, by divisions by a constant (which
    /// compile to multiplications); a single digit, as flags of 0 are, is one store.
    @inline(__always)
    public static func writeDecimal(_ value: UInt64, to out: UnsafeMutableRawPointer) -> Int {
        if value < 10 {
            out.storeBytes(of: UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value), as: UInt8.self)
            return 1
        }
        var count = 2
        var bound: UInt64 = 100
        while count < 20 && value >= bound {
            count += 1
            bound &*= 10
        }
        let pairs = UnsafeRawPointer(digitPairs.utf8Start)
        var rest = value
        var index = count
        while rest >= 100 {
            let pair = Int(truncatingIfNeeded: rest % 100)
            rest /= 100
            index -= 2
            (out + index).copyMemory(from: pairs + 2 * pair, byteCount: 2)
        }
        if rest >= 10 {
            (out + index - 2).copyMemory(from: pairs + 2 * Int(truncatingIfNeeded: rest), byteCount: 2)
        } else {
            out.storeBytes(
                of: UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest),
                toByteOffset: index - 1,
                as: UInt8.self
            )
        }
        return count
    }

    /// "00", "01", ... "99" back to back: the digits of every number below 100.
    static var digitPairs: StaticString {
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"
    }

    /// The value after `incr` or `decr`: its decimal digits.
    public static func number(_ value: UInt64) -> [UInt8] {
        var digits = [UInt8](repeating: 0, count: 20)
        let count = digits.withUnsafeMutableBytes { writeDecimal(value, to: $0.baseAddress!) }
        return Array(digits[0..<count]) + [13, 10]
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
