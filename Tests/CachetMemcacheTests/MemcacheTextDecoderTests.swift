import Testing

@testable import CachetMemcache

/// memcached's text protocol decoded in place: every command's shape, the lines memcached answers bad input
/// with, and commands cut anywhere.
@Suite("memcached text protocol: the decoder")
struct MemcacheTextDecoderTests {
    static func decode(_ text: String, maximumValueLength: Int = 1 << 20) -> (MemcacheTextDecoding, [UInt8]) {
        let bytes = Array(text.utf8)
        return (bytes.withUnsafeBytes { MemcacheTextDecoder.decode($0, maximumValueLength: maximumValueLength) }, bytes)
    }

    static func text(_ range: Range<Int>, _ bytes: [UInt8]) -> String { String(decoding: bytes[range], as: UTF8.self) }

    @Test func storageCommandsCarryKeyFlagsExpiryDataAndNoreply() {
        let (decoded, bytes) = Self.decode("set user:1 42 3600 5\r\nhello\r\nget x\r\n")
        guard
            case .command(.store(let verb, let key, let flags, let exptime, let data, let cas, let noreply), let end) =
                decoded
        else {
            Issue.record("\(decoded)")
            return
        }
        #expect(verb == .set && Self.text(key, bytes) == "user:1" && flags == 42 && exptime == 3600)
        #expect(Self.text(data, bytes) == "hello" && cas == nil && !noreply && end == 29)
        for verb in ["add", "replace", "append", "prepend"] {
            let (other, _) = Self.decode("\(verb) k 0 -1 0 noreply\r\n\r\n")
            guard case .command(.store(let found, _, _, -1, let data, nil, true), 21 + verb.count) = other else {
                Issue.record("\(verb): \(other)")
                return
            }
            #expect(found.rawValue == verb && data.isEmpty)
        }
        let (casCommand, _) = Self.decode("cas k 1 0 2 99\r\nab\r\n")
        guard case .command(.store(.cas, _, 1, 0, _, 99, false), _) = casCommand else {
            Issue.record("\(casCommand)")
            return
        }
    }

    /// Numbers are read from the bytes as Swift reads them from a string, for every width the commands use.
    @Test func numbersReadAsSwiftReadsThem() {
        var samples = [
            "", "+", "-", "0", "-0", "+0", "00012", "18446744073709551615", "18446744073709551616",
            "-9223372036854775808", "-9223372036854775809", "9223372036854775807", "9223372036854775808", "4294967295",
            "4294967296", "-1", "1a", " 1", "1 ", "--1", "+-1", "99999999999999999999999", "-4294967295", "2147483648",
        ]
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("0123456789+- a".utf8)
        for _ in 0..<2000 {
            let length = Int.random(in: 1...22, using: &generator)
            samples.append(
                String(decoding: (0..<length).map { _ in alphabet.randomElement(using: &generator)! }, as: UTF8.self)
            )
        }
        for text in samples {
            let bytes = Array(text.utf8)
            bytes.withUnsafeBytes { buffer in
                let range = 0..<bytes.count
                #expect(MemcacheTextDecoder.parseInteger(range, in: buffer) as UInt32? == UInt32(text), "\(text)")
                #expect(MemcacheTextDecoder.parseInteger(range, in: buffer) as Int64? == Int64(text), "\(text)")
                #expect(MemcacheTextDecoder.parseInteger(range, in: buffer) as UInt64? == UInt64(text), "\(text)")
                #expect(MemcacheTextDecoder.parseInteger(range, in: buffer) as Int? == Int(text), "\(text)")
            }
        }
    }

    /// The test of eight key bytes at once says what a test of each byte says, and its lowest bit marks the
    /// first byte that ends or spoils a key.
    @Test func eightBytesAtOnceAgreeWithEachByte() {
        func slow(_ word: UInt64) -> Int? {
            (0..<8).first { index in
                let byte = UInt8(truncatingIfNeeded: word >> (8 * UInt64(index)))
                return byte <= 0x20 || byte == 0x7f
            }
        }
        var words: [UInt64] = []
        for position in 0..<8 {
            for byte in [0x00, 0x1f, 0x20, 0x21, 0x7e, 0x7f, 0x80, 0xa0, 0xff] as [UInt64] {
                let filler: UInt64 = 0x6161_6161_6161_6161
                words.append(filler & ~(0xff << (8 * UInt64(position))) | byte << (8 * UInt64(position)))
            }
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100_000 { words.append(UInt64.random(in: 0 ... .max, using: &generator)) }
        for word in words {
            let mask = MemcacheTextDecoder.spaceOrControlMask(word)
            #expect((mask != 0) == (slow(word) != nil), "\(String(word, radix: 16))")
            if mask != 0 { #expect(mask.trailingZeroBitCount / 8 == slow(word), "\(String(word, radix: 16))") }
        }
    }

    /// `get` and `gets` take a path of their own (no token array): the same answers as the general one.
    @Test func getsAndGetsDecodeAsTheGeneralPathWould() {
        for (line, keys) in [
            ("get a\r\n", ["a"]), ("gets  a   b \r\n", ["a", "b"]), ("get a\n", ["a"]),
            ("get " + String(repeating: "k", count: 250) + "\r\n", [String(repeating: "k", count: 250)]),
        ] {
            let (decoded, bytes) = Self.decode(line)
            guard case .command(.retrieve(let found, _, nil), let end) = decoded, end == line.utf8.count else {
                Issue.record("\(line): \(decoded)")
                continue
            }
            #expect(bytes.withUnsafeBytes { found.ranges(in: $0).map { Self.text($0, bytes) } } == keys, "\(line)")
        }
        for line in [
            "get \r\n", "gets   \r\n", "get a\u{01}b\r\n", "get " + String(repeating: "k", count: 251) + "\r\n",
            "get\r\n",
        ] {
            guard case .failure(.badFormat, let end, false) = Self.decode(line).0, end == line.utf8.count else {
                Issue.record("\(line.debugDescription): \(Self.decode(line).0)")
                continue
            }
        }
        guard case .failure(.unknownCommand, _, _) = Self.decode("getx a\r\n").0 else {
            Issue.record("getx")
            return
        }
    }

    /// `decodeGetLine` (the session's path for `get` and `gets`) finds what `decode` finds, and nothing else.
    @Test func theGetLinePathAgreesWithDecode() {
        for line in ["get a\r\n", "gets  a   b \r\n", "get a bb ccc\n", "get k\r\nget x\r\n"] {
            let bytes = Array(line.utf8)
            let found = bytes.withUnsafeBytes { MemcacheTextDecoder.decodeGetLine($0) }
            guard let found else {
                Issue.record("\(line.debugDescription): not found")
                continue
            }
            #expect(
                Self.decode(line).0
                    == .command(.retrieve(keys: found.keys, withCAS: found.withCAS, touch: nil), end: found.end)
            )
        }
        for line in [
            "get a", "get \r\n", "get a\u{01}\r\n", " get a\r\n", "gat 1 a\r\n", "set a 0 0 1\r\nx\r\n", "getx a\r\n",
        ] {
            let found = Array(line.utf8).withUnsafeBytes { MemcacheTextDecoder.decodeGetLine($0) }
            #expect(found == nil, "\(line.debugDescription)")
        }
    }

    /// Random `get` lines (spaces, key bytes, control bytes, DEL, bytes past ASCII; keys short and long),
    /// with and without commands after them (the keys are scanned eight bytes at a time where the buffer has
    /// them, a byte at a time near its end): decoded as a reading by tokens says.
    @Test func randomGetLinesDecodeAsTheirTokensSay() {
        var generator = SystemRandomNumberGenerator()
        let alphabet: [UInt8] = [0x20, 0x20, 0x61, 0x62, 0x3a, 0x30, 0xc3, 0xa9, 0x01, 0x7f, 0x0d, 0x09]
        for round in 0..<20_000 {
            var line = Array("get ".utf8)
            let length = Int.random(in: 0...(round % 10 == 0 ? 300 : 40), using: &generator)
            for _ in 0..<length {
                // Mostly key bytes, so that many lines are good.
                let byte =
                    Int.random(in: 0..<8, using: &generator) == 0
                    ? alphabet.randomElement(using: &generator)!
                    : alphabet[Int.random(in: 0..<8, using: &generator) % 6]
                line.append(byte)
            }
            // Now and then a key at the length limit, or just past it.
            if round % 7 == 0 {
                line += [0x20] + [UInt8](repeating: 0x6b, count: Int.random(in: 248...252, using: &generator))
            }
            let ending: [UInt8] = Bool.random(using: &generator) ? [0x0d, 0x0a] : [0x0a]
            let bytes = line + ending + (Bool.random(using: &generator) ? Array("get next\r\n".utf8) : [])
            // The reference: the line (without a final `\r`) split at spaces.
            var content = line
            if ending == [0x0a], content.last == 0x0d { content.removeLast() }
            let tokens = content.dropFirst(4).split(separator: 0x20).map { Array($0) }
            let good =
                !tokens.isEmpty
                && tokens.allSatisfy { token in
                    token.count <= 250 && token.allSatisfy { $0 > 0x20 && $0 != 0x7f }
                }
            let decoded = bytes.withUnsafeBytes { MemcacheTextDecoder.decode($0) }
            switch decoded {
            case .command(.retrieve(let keys, false, nil), let end):
                #expect(good, "\(bytes)")
                #expect(end == line.count + ending.count)
                let found = bytes.withUnsafeBytes { buffer in keys.ranges(in: buffer).map { Array(bytes[$0]) } }
                #expect(found == tokens, "\(bytes)")
            case .failure(.badFormat, _, false):
                #expect(!good, "\(bytes)")
            default:
                Issue.record("\(bytes): \(decoded)")
            }
        }
    }

    @Test func retrievalCommandsTakeManyKeys() {
        let (get, bytes) = Self.decode("get a bb ccc\r\n")
        guard case .command(.retrieve(let keys, false, nil), 14) = get else {
            Issue.record("\(get)")
            return
        }
        #expect(bytes.withUnsafeBytes { keys.ranges(in: $0).map { Self.text($0, bytes) } } == ["a", "bb", "ccc"])
        guard case .command(.retrieve(_, true, nil), _) = Self.decode("gets a\n").0 else {
            Issue.record("gets")
            return
        }
        guard case .command(.retrieve(let touched, false, 60), _) = Self.decode("gat 60 a b\r\n").0, touched.count == 2
        else {
            Issue.record("gat")
            return
        }
        guard case .command(.retrieve(_, true, -1), _) = Self.decode("gats -1 a\r\n").0 else {
            Issue.record("gats")
            return
        }
    }

    @Test func theOtherCommands() {
        let cases: [(String, MemcacheTextCommand)] = [
            ("delete k\r\n", .delete(key: 7..<8, noreply: false)),
            ("delete k 0 noreply\r\n", .delete(key: 7..<8, noreply: true)),
            ("incr k 18446744073709551615\r\n", .arithmetic(increment: true, key: 5..<6, delta: .max, noreply: false)),
            ("decr k 1 noreply\r\n", .arithmetic(increment: false, key: 5..<6, delta: 1, noreply: true)),
            ("touch k 10\r\n", .touch(key: 6..<7, exptime: 10, noreply: false)),
            ("flush_all\r\n", .flushAll(delay: 0, noreply: false)),
            ("flush_all 30 noreply\r\n", .flushAll(delay: 30, noreply: true)),
            ("version\r\n", .version),
            ("verbosity 1\r\n", .verbosity(noreply: false)),
            ("stats\r\n", .stats(argument: nil)),
            ("stats items\r\n", .stats(argument: 6..<11)),
            ("quit\r\n", .quit),
            ("  get   k  \r\n", .retrieve(keys: MemcacheKeyList(span: 8..<9, count: 1), withCAS: false, touch: nil)),
        ]
        for (line, expected) in cases {
            let (decoded, bytes) = Self.decode(line)
            #expect(decoded == .command(expected, end: bytes.count), "\(line.debugDescription): \(decoded)")
        }
    }

    @Test func badInputIsAnsweredAsMemcachedAnswersIt() {
        let cases: [(String, MemcacheTextError)] = [
            ("bogus\r\n", .unknownCommand),
            ("\r\n", .badFormat),
            (" \n", .badFormat),
            ("set k 0 0\r\n", .badFormat),
            ("set k 0 0 -1\r\n", .badFormat),
            ("get\r\n", .badFormat),
            ("get \(String(repeating: "k", count: 251))\r\n", .badFormat),
            ("get a\u{01}b\r\n", .badFormat),
            ("delete k 10\r\n", .badDeleteFormat),
            ("incr k -1\r\n", .invalidDelta),
            ("incr k 18446744073709551616\r\n", .invalidDelta),
            ("touch k\r\n", .badFormat),
            ("flush_all -1\r\n", .invalidExptime),
            ("flush_all invalid\r\n", .invalidExptime),
            ("set k 0 0 2147483646\r\n", .badFormat),
            ("set k 0 0 99999999999999999999\r\n", .badFormat),
        ]
        for (line, expected) in cases {
            let (decoded, bytes) = Self.decode(line)
            #expect(decoded == .failure(expected, end: bytes.count), "\(line.debugDescription): \(decoded)")
            #expect(!expected.closesConnection)
        }
        // A storage line whose length can be read but whose other fields cannot: its data block is swallowed
        // with it, as memcached swallows it.
        let swallowing: [(String, Int)] = [
            ("set k notanumber 0 1\r\n", 3), ("set k 4294967296 0 1\r\n", 3), ("cas k 0 0 6 \r\n", 8),
            ("set \(String(repeating: "k", count: 251)) 0 0 1\r\n", 3),
        ]
        for (line, swallowed) in swallowing {
            let (decoded, bytes) = Self.decode(line)
            #expect(decoded == .failure(.badFormat, end: bytes.count + swallowed), "\(line.debugDescription)")
        }
        // An HTTP request: closed without a word.
        for line in ["GET / HTTP/1.0\r\n", "PUT /a/b HTTP/1.1\r\n", "DELETE HTTP/1.1\r\n"] {
            let (decoded, bytes) = Self.decode(line)
            #expect(
                decoded == .failure(.httpRequest, end: bytes.count) && MemcacheTextError.httpRequest.closesConnection
            )
        }
        #expect(Self.decode("verbosity\r\n").0 == .failure(.unknownCommand, end: 11))
        // memcached does not check verbosity's level, takes `noreply` alone, and refuses more than two words;
        // memcached 1.6 ignores words after version and quit; a stats group it does not have is unknown.
        #expect(Self.decode("verbosity x\r\n").0 == .command(.verbosity(noreply: false), end: 13))
        #expect(Self.decode("verbosity noreply\r\n").0 == .command(.verbosity(noreply: true), end: 19))
        #expect(Self.decode("verbosity foo bar my\r\n").0 == .failure(.unknownCommand, end: 22))
        #expect(Self.decode("version foo bar\r\n").0 == .command(.version, end: 17))
        #expect(Self.decode("quit now\r\n").0 == .command(.quit, end: 10))
        #expect(Self.decode("stats noreply\r\n").0 == .failure(.unknownCommand, end: 15))
        #expect(Self.decode("stats cachedump 1 1\r\n").0 != .failure(.unknownCommand, end: 21))
        #expect(
            Self.decode("cache_memlimit 64\r\n").0
                == .command(.cacheMemoryLimit(megabytes: 64, noreply: false), end: 19)
        )
        #expect(Self.decode("cache_memlimit 0\r\n").0 == .failure(.badFormat, end: 18))
        // With noreply, no line at all: the failure says so.
        #expect(Self.decode("incr k x noreply\r\n").0 == .failure(.invalidDelta, end: 18, noreply: true))
        #expect(Self.decode("set k x 0 1 noreply\r\n").0 == .failure(.badFormat, end: 24, noreply: true))
        // One token more than a storage command takes is ignored, as memcached ignores it.
        guard case .command(.store(.set, _, 0, 0, _, nil, false), 18) = Self.decode("set k 0 0 1 x\r\na\r\n").0 else {
            Issue.record("an extra token")
            return
        }
        #expect(MemcacheTextError.unknownCommand.line == "ERROR\r\n")
        #expect(MemcacheTextError.badFormat.line == "CLIENT_ERROR bad command line format\r\n")
    }

    @Test func dataBlocksMustEndWithCRLFAndFitTheLimit() {
        let (bad, bytes) = Self.decode("set k 0 0 3\r\nabcXY")
        #expect(bad == .failure(.badDataChunk, end: bytes.count), "the block is consumed with its two bytes")
        let (large, largeBytes) = Self.decode("set k 0 0 5\r\nhello\r\n", maximumValueLength: 4)
        #expect(large == .failure(.tooLarge(replacing: 4..<5), end: largeBytes.count), "a set names its key")
        // Refused at once, before its data arrives: the caller discards it as it comes.
        let (early, _) = Self.decode("set k 0 0 100000000 noreply\r\n", maximumValueLength: 4)
        #expect(early == .failure(.tooLarge(replacing: 4..<5), end: 29 + 100_000_000 + 2, noreply: true))
        let (add, _) = Self.decode("add k 0 0 5\r\nhello\r\n", maximumValueLength: 4)
        #expect(add == .failure(.tooLarge(replacing: nil), end: 20), "only a set takes the older value away")
        #expect(MemcacheTextError.tooLarge(replacing: nil).line == "SERVER_ERROR object too large for cache\r\n")
    }

    @Test func aCommandCutAnywhereNeedsMoreAndALineWithoutEndIsTooLong() {
        let whole = "set k 7 0 5\r\nhello\r\n"
        let bytes = Array(whole.utf8)
        for cut in 0..<bytes.count {
            let decoded = bytes[0..<cut].withUnsafeBytes { MemcacheTextDecoder.decode($0) }
            #expect(decoded == .needMore, "cut at \(cut)")
        }
        let (long, longBytes) = Self.decode("set " + String(repeating: "k", count: 3000))
        #expect(long == .failure(.lineTooLong, end: longBytes.count) && MemcacheTextError.lineTooLong.closesConnection)
        #expect(MemcacheTextError.lineTooLong.line.isEmpty, "closed without a reply, as memcached closes it")
        // A get of many keys may run longer before its end arrives.
        #expect(Self.decode("get " + String(repeating: "k ", count: 2000)).0 == .needMore)
    }
}
