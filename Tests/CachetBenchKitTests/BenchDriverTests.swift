import CachetBenchKit
import CachetWire
import Testing

/// Parses `stream` fed in pieces of `chunk` bytes, as replies arrive from a socket, and checks that a
/// partial reply never consumes anything.
func parseAll<D: BenchProtocolDriver>(_ driver: D, _ stream: [UInt8], chunk: Int) throws -> [BenchReply] {
    var replies: [BenchReply] = []
    var received: [UInt8] = []
    var offset = 0
    var position = 0
    while position < stream.count {
        let next = min(stream.count, position + chunk)
        received += stream[position..<next]
        position = next
        while let (reply, end) = try received.withUnsafeBytes({ try driver.parseReply($0, at: offset) }) {
            #expect(end > offset && end <= received.count)
            replies.append(reply)
            offset = end
        }
    }
    #expect(offset == stream.count, "bytes left over")
    return replies
}

/// Every chunk size from 1 byte to the whole stream.
func everyChunking<D: BenchProtocolDriver>(_ driver: D, _ text: [UInt8], expect expected: [BenchReply]) throws {
    for chunk in 1...text.count {
        let replies = try parseAll(driver, text, chunk: chunk)
        #expect(replies == expected, "chunk \(chunk)")
    }
}

@Suite("cachet-bench request encoders")
struct BenchEncoderTests {
    @Test func memcacheRequestsAreExact() {
        let driver = MemcacheDriver()
        #expect(
            String(decoding: driver.setRequest(key: Array("key:1".utf8), value: Array("hello".utf8)), as: UTF8.self)
                == "set key:1 0 0 5\r\nhello\r\n"
        )
        #expect(String(decoding: driver.getRequest(key: Array("key:1".utf8)), as: UTF8.self) == "get key:1\r\n")
        #expect(String(decoding: driver.setRequest(key: [0x6b], value: []), as: UTF8.self) == "set k 0 0 0\r\n\r\n")
        // A get of several keys, within its bound.
        let keys = Array("key:1key:22key:333".utf8)
        let bounds = [0..<5, 5..<11, 11..<18]
        let bound = driver.multiGetLengthBound(keyLength: 7, keyCount: 3)
        let destination = UnsafeMutableRawPointer.allocate(byteCount: bound, alignment: 1)
        defer { destination.deallocate() }
        let written = keys.withUnsafeBytes { keys in
            driver.writeGet(keyCount: 3, key: { UnsafeRawBufferPointer(rebasing: keys[bounds[$0]]) }, to: destination)
        }
        #expect(written <= bound)
        #expect(
            String(decoding: UnsafeRawBufferPointer(start: destination, count: written), as: UTF8.self)
                == "get key:1 key:22 key:333\r\n"
        )
    }

    @Test func respRequestsAreExact() {
        let driver = RESPDriver()
        #expect(
            String(decoding: driver.setRequest(key: Array("k".utf8), value: Array("hello".utf8)), as: UTF8.self)
                == "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"
        )
        #expect(
            String(decoding: driver.getRequest(key: Array("key:0000000042".utf8)), as: UTF8.self)
                == "*2\r\n$3\r\nGET\r\n$14\r\nkey:0000000042\r\n"
        )
    }

    @Test func cachetRequestsMatchTheCodec() {
        let driver = CachetDriver()
        #expect(
            driver.setRequest(key: [1, 2], value: [3])
                == CachetCommand.put(key: [1, 2], value: [3], ttl: 0).encoded(id: 0)
        )
        #expect(driver.getRequest(key: [1, 2]) == CachetCommand.get(key: [1, 2]).encoded(id: 0))
        // Exact bytes: length 8 + 2 + 2, version 1, opcode GET, flags 0, id 0, key_len 2, key.
        #expect(driver.getRequest(key: [0x61, 0x62]) == [0, 0, 0, 12, 1, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0x61, 0x62])
    }

    @Test(arguments: [0, 1, 9, 10, 99, 100, 16384, 1_000_000])
    func requestsFitTheirBound(valueLength: Int) {
        let key = [UInt8](repeating: 0x6b, count: 14)
        let value = [UInt8](repeating: 0x76, count: valueLength)
        func check<D: BenchProtocolDriver>(_ driver: D) {
            let bound = driver.requestLengthBound(keyLength: key.count, valueLength: value.count)
            #expect(driver.setRequest(key: key, value: value).count <= bound)
            #expect(driver.getRequest(key: key).count <= bound)
        }
        check(CachetDriver())
        check(MemcacheDriver())
        check(RESPDriver())
    }
}

@Suite("cachet-bench reply parsers")
struct BenchParserTests {
    @Test func memcacheRepliesParseAtEveryChunking() throws {
        let stream = Array(
            ("STORED\r\nVALUE key:1 0 5\r\nhello\r\nEND\r\nEND\r\nSERVER_ERROR out of memory\r\n"
                + "VALUE k 7 0\r\n\r\nEND\r\nNOT_STORED\r\nERROR\r\n").utf8
        )
        try everyChunking(
            MemcacheDriver(),
            stream,
            expect: [.stored, .hit(length: 5), .miss, .error, .hit(length: 0), .error, .error]
        )
    }

    @Test func memcacheGetsOfSeveralKeysParseAtEveryChunking() throws {
        let stream = Array(
            ("VALUE a 0 3\r\nabc\r\nVALUE b 0 2\r\nEN\r\nVALUE c 1 0\r\n\r\nEND\r\n"
                + "VALUE a 0 3\r\nabc\r\nEND\r\nEND\r\nVALUE a 0 1\r\nx\r\nVALUE b 0 1\r\ny\r\nEND\r\n").utf8
        )
        try everyChunking(
            MemcacheDriver(),
            stream,
            expect: [.hits(count: 3, bytes: 5), .hit(length: 3), .miss, .hits(count: 2, bytes: 2)]
        )
        // A value followed by neither VALUE nor END.
        #expect(throws: BenchError.self) {
            try parseAll(MemcacheDriver(), Array("VALUE a 0 1\r\nx\r\nSTORED\r\n".utf8), chunk: 100)
        }
    }

    @Test func memcacheValueContainingLineEndsIsSkippedByLength() throws {
        let stream = Array("VALUE k 0 9\r\nEND\r\nEND!\r\nEND\r\nSTORED\r\n".utf8)
        try everyChunking(MemcacheDriver(), stream, expect: [.hit(length: 9), .stored])
    }

    @Test func respRepliesParseAtEveryChunking() throws {
        let stream = Array("+OK\r\n$5\r\nhello\r\n$-1\r\n-ERR wrong\r\n$0\r\n\r\n$4\r\n\r\n\r\n\r\n".utf8)
        try everyChunking(
            RESPDriver(),
            stream,
            expect: [.stored, .hit(length: 5), .miss, .error, .hit(length: 0), .hit(length: 4)]
        )
    }

    @Test func cachetRepliesParseAtEveryChunking() throws {
        let stream =
            CachetResponse(opcode: .put, status: .ok, id: 0).encoded
            + CachetResponse(opcode: .get, status: .ok, id: 0, body: [1, 2, 3]).encoded
            + CachetResponse(opcode: .get, status: .notFound, id: 0).encoded
            + CachetResponse(opcode: .get, status: .tooLarge, id: 0, body: Array("no".utf8)).encoded
            + CachetResponse(opcode: .get, status: .ok, id: 0, body: []).encoded
        try everyChunking(CachetDriver(), stream, expect: [.stored, .hit(length: 3), .miss, .error, .hit(length: 0)])
    }

    @Test(arguments: [
        "?what\r\n", ":1\r\n", "+QUEUED\r\n", "$abc\r\n", "$-2\r\n", "$3\r\nabcde\r\n", "*1\r\n",
    ])
    func malformedRESPIsAnError(text: String) {
        #expect(throws: BenchError.self) { try parseAll(RESPDriver(), Array(text.utf8), chunk: 100) }
    }

    @Test(arguments: [
        "STORE\r\n", "VALUE k 0 x\r\n", "VALUE k 0 3\r\nabc\r\nEND!\r\n", "VALUE k 0 3\r\nabcd\r\nEND\r\n",
        "hello\r\n", "VALUE 3\r\nabc\r\nEND\r\n",
    ])
    func malformedMemcacheIsAnError(text: String) {
        #expect(throws: BenchError.self) { try parseAll(MemcacheDriver(), Array(text.utf8), chunk: 100) }
    }

    @Test func malformedCachetIsAnError() {
        // A payload length below the 8-byte header.
        #expect(throws: BenchError.self) { try parseAll(CachetDriver(), [0, 0, 0, 2, 1, 2], chunk: 100) }
        // Version 2.
        var reply = CachetResponse(opcode: .get, status: .ok, id: 0).encoded
        reply[4] = 2
        #expect(throws: BenchError.self) { try parseAll(CachetDriver(), reply, chunk: 100) }
        // OK to a PING where a GET or PUT was sent.
        #expect(throws: BenchError.self) {
            try parseAll(CachetDriver(), CachetResponse(opcode: .ping, status: .ok, id: 0).encoded, chunk: 100)
        }
    }

    @Test func partialRepliesWaitForTheirLastByte() throws {
        let value = [UInt8](repeating: 0x78, count: 1000)
        let stream = Array("$1000\r\n".utf8) + value + Array("\r\n".utf8)
        let partial = Array(stream.dropLast())
        let parsed = try partial.withUnsafeBytes { try RESPDriver().parseReply($0, at: 0) }
        #expect(parsed == nil)
        let whole = try stream.withUnsafeBytes { try RESPDriver().parseReply($0, at: 0) }
        #expect(whole?.reply == .hit(length: 1000) && whole?.end == stream.count)
    }
}
