import CachetMemcache
import Testing

/// memcached's reply lines as the node writes them, without making strings.
@Suite("memcached text protocol: the replies")
struct MemcacheTextReplyTests {
    @Test func valuesAreWrittenAsMemcachedWritesThem() {
        var output: [UInt8] = []
        Array("k1".utf8).withUnsafeBytes { key in
            Array("hello".utf8).withUnsafeBytes { data in
                MemcacheTextReply.appendValue(key: key, flags: 42, data: data, cas: nil, to: &output)
                MemcacheTextReply.appendValue(key: key, flags: 0, data: data, cas: 7, to: &output)
            }
        }
        output += MemcacheTextReply.end
        #expect(
            String(decoding: output, as: UTF8.self) == "VALUE k1 42 5\r\nhello\r\nVALUE k1 0 5 7\r\nhello\r\nEND\r\n"
        )
        #expect(MemcacheTextReply.number(18_446_744_073_709_551_615) == Array("18446744073709551615\r\n".utf8))
        #expect(MemcacheTextReply.stat("pid", "42") == Array("STAT pid 42\r\n".utf8))
    }

    @Test func incrWrapsAndDecrStopsAtZero() {
        #expect(MemcacheTextReply.arithmetic(.max, delta: 2, increment: true) == 1)
        #expect(MemcacheTextReply.arithmetic(5, delta: 7, increment: false) == 0)
        #expect(MemcacheTextReply.arithmetic(5, delta: 3, increment: false) == 2)
    }

    private static func decimal(_ value: UInt64) -> String {
        withUnsafeTemporaryAllocation(byteCount: 20, alignment: 1) { out in
            let count = MemcacheTextReply.writeDecimal(value, to: out.baseAddress!)
            return String(decoding: UnsafeRawBufferPointer(rebasing: out[0..<count]), as: UTF8.self)
        }
    }

    @Test func decimalsAreWrittenAsSwiftPrintsThem() {
        var values: [UInt64] = [0, 1, 9, 10, 11, 99, 100, 101, 12_345, .max, .max - 1]
        var power: UInt64 = 1
        for _ in 0..<19 {
            power *= 10
            values += [power - 1, power, power + 1]
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<1000 {
            values.append(UInt64.random(in: 0 ... .max, using: &generator) >> UInt64.random(in: 0...63))
        }
        for value in values { #expect(Self.decimal(value) == String(value)) }
    }

    @Test func valueLinesCarryTheKeyFlagsLengthAndCAS() {
        let key = Array("key:42".utf8)
        let line = key.withUnsafeBytes { key in
            withUnsafeTemporaryAllocation(
                byteCount: MemcacheTextReply.valueLineCapacity(keyLength: key.count),
                alignment: 1
            ) { out in
                let count = MemcacheTextReply.writeValueLine(
                    key: key,
                    flags: 4_294_967_295,
                    length: 100,
                    cas: 18_446_744_073_709_551_615,
                    to: out.baseAddress!
                )
                return String(decoding: UnsafeRawBufferPointer(rebasing: out[0..<count]), as: UTF8.self)
            }
        }
        #expect(line == "VALUE key:42 4294967295 100 18446744073709551615\r\n")
    }
}
