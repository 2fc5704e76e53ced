import CachetWire
import Testing

@Suite("Body decoder: keys, values, error precedence")
struct CachetBodyDecoderTests {
    /// A request frame with an arbitrary body.
    static func request(_ opcode: CachetOpcode, id: UInt32 = 1, body: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        body.withUnsafeBytes {
            CachetFrameEncoder.appendFrame(
                header: CachetFrameHeader(opcode: opcode, word: 0, id: id),
                body: $0,
                to: &bytes
            )
        }
        return bytes
    }

    static func keyBody(declared: Int, actual: Int) -> [UInt8] {
        [UInt8(declared >> 8), UInt8(declared & 0xff)] + [UInt8](repeating: 0x6b, count: actual)
    }

    static func putBody(ttl: UInt32 = 0, declared: Int, rest: Int) -> [UInt8] {
        [UInt8(ttl >> 24), UInt8(ttl >> 16 & 0xff), UInt8(ttl >> 8 & 0xff), UInt8(ttl & 0xff)]
            + keyBody(declared: declared, actual: rest)
    }

    static func error(_ bytes: [UInt8]) -> CachetWireError? {
        guard case .bodyError(let error, _) = decodeOne(bytes) else { return nil }
        return error
    }

    @Test(arguments: [CachetOpcode.get, .delete])
    func keysOfOneAndOf4096BytesAreAccepted(opcode: CachetOpcode) {
        for length in [1, 4096] {
            let bytes = Self.request(opcode, body: Self.keyBody(declared: length, actual: length))
            let expected: CachetCommand =
                opcode == .get
                ? .get(key: .init(repeating: 0x6b, count: length))
                : .delete(key: .init(repeating: 0x6b, count: length))
            #expect(decodeOne(bytes) == .command(expected, bytes: bytes))
        }
    }

    @Test(arguments: [CachetOpcode.get, .delete, .put])
    func aKeyOf4097BytesIsTooLargeAndKeepsTheConnection(opcode: CachetOpcode) {
        let body =
            opcode == .put ? Self.putBody(declared: 4097, rest: 4097 + 3) : Self.keyBody(declared: 4097, actual: 4097)
        let error = Self.error(Self.request(opcode, body: body))
        #expect(error?.code == .keyTooLong && error?.status == .tooLarge && error?.closesConnection == false)
        #expect(error?.message == "key of 4097 bytes exceeds the 4096-byte limit")
    }

    @Test(arguments: [CachetOpcode.get, .delete, .put])
    func anEmptyKeyIsABadRequest(opcode: CachetOpcode) {
        let body = opcode == .put ? Self.putBody(declared: 0, rest: 5) : Self.keyBody(declared: 0, actual: 0)
        let error = Self.error(Self.request(opcode, body: body))
        #expect(error?.code == .emptyKey && error?.status == .badRequest && error?.closesConnection == false)
        #expect(error?.message == "empty key: keys are 1 to 4096 bytes")
    }

    @Test func aPutMayCarryAnEmptyValue() {
        let bytes = Self.request(.put, body: Self.putBody(ttl: 60, declared: 4096, rest: 4096))
        #expect(
            decodeOne(bytes)
                == .command(.put(key: .init(repeating: 0x6b, count: 4096), value: [], ttl: 60), bytes: bytes)
        )
    }

    @Test func thePutValueIsEverythingAfterTheKey() throws {
        let bytes = Self.request(.put, body: [0xff, 0xff, 0xff, 0xff, 0, 2, 0x61, 0x62, 0, 0, 0, 1, 0xff])
        #expect(
            decodeOne(bytes)
                == .command(.put(key: [0x61, 0x62], value: [0, 0, 0, 1, 0xff], ttl: 0xffff_ffff), bytes: bytes)
        )
        // The raw decoder reports offsets into the buffer.
        let put = try bytes.withUnsafeBytes { buffer in
            try CachetBodyDecoder.decodePut(in: buffer, body: 12..<bytes.count)
        }
        #expect(put == CachetPutBody(ttl: 0xffff_ffff, key: 18..<20, value: 20..<25))
    }

    @Test(arguments: 0...5)
    func aPutBodyShorterThanItsPrefixIsABadRequest(length: Int) {
        let error = Self.error(Self.request(.put, body: [UInt8](repeating: 0, count: length)))
        #expect(error?.code == .malformedBody && error?.status == .badRequest)
        #expect(error?.message == "PUT body of \(length) bytes is shorter than its 6-byte ttl and key length")
    }

    @Test(arguments: [CachetOpcode.get, .delete])
    func aKeyBodyShorterThanItsLengthIsABadRequest(opcode: CachetOpcode) {
        for length in 0...1 {
            let error = Self.error(Self.request(opcode, body: [UInt8](repeating: 0, count: length)))
            #expect(error?.message == "key body of \(length) bytes is shorter than its 2-byte key length")
        }
        let error = Self.error(Self.request(opcode, body: Self.keyBody(declared: 9, actual: 1)))
        #expect(error?.code == .malformedBody && error?.status == .badRequest && error?.closesConnection == false)
        #expect(error?.message == "key body declares a 9-byte key but only 1 bytes follow")
    }

    @Test func aPutKeyLongerThanItsBodyIsABadRequest() {
        let error = Self.error(Self.request(.put, body: Self.putBody(declared: 5, rest: 4)))
        #expect(error?.code == .malformedBody)
        #expect(error?.message == "PUT body declares a 5-byte key but only 4 bytes follow")
    }

    @Test(arguments: [CachetOpcode.get, .delete])
    func bytesAfterTheKeyAreABadRequest(opcode: CachetOpcode) {
        let error = Self.error(Self.request(opcode, body: Self.keyBody(declared: 1, actual: 3)))
        #expect(error?.code == .malformedBody && error?.status == .badRequest)
        #expect(error?.message == "key body declares a 1-byte key but carries 3 bytes after its length")
    }

    /// The key length is judged before the body's size: 0 is BAD_REQUEST and over 4096 is TOO_LARGE even
    /// when the body is also too short or too long.
    @Test func theKeyLengthIsJudgedBeforeTheBodySize() {
        #expect(Self.error(Self.request(.get, body: Self.keyBody(declared: 5000, actual: 3)))?.code == .keyTooLong)
        #expect(Self.error(Self.request(.get, body: Self.keyBody(declared: 0, actual: 3)))?.code == .emptyKey)
        #expect(Self.error(Self.request(.put, body: Self.putBody(declared: 0xffff, rest: 0)))?.code == .keyTooLong)
    }

    @Test func clearTakesNothingOrKeyPrefixes() throws {
        func prefixes(_ body: [UInt8]) throws -> [[UInt8]] {
            try body.withUnsafeBytes { buffer in
                try CachetBodyDecoder.decodeClear(in: buffer, body: 0..<buffer.count)
            }
        }
        #expect(try prefixes([]) == [])
        #expect(try prefixes([0, 2, 0x61, 0x3a, 0, 1, 0x63]) == [Array("a:".utf8), Array("c".utf8)])
        let tooMany: [UInt8] = (0...CachetBodyDecoder.maximumClearPrefixes).flatMap { _ -> [UInt8] in [0, 1, 0x61] }
        let cases: [([UInt8], String)] = [
            ([UInt8(0)], "CLEAR body ends inside a 2-byte prefix length"),
            ([0, 0], "CLEAR prefix of 0 bytes: a prefix is 1 to 4096 bytes"),
            (
                [0x10, 0x01] + [UInt8](repeating: 0x61, count: 4097),
                "CLEAR prefix of 4097 bytes: a prefix is 1 to 4096 bytes"
            ),
            ([0, 5, 0x61, 0x62], "CLEAR body declares a 5-byte prefix but carries 2 bytes"),
            (tooMany, "CLEAR names more than 64 key prefixes"),
        ]
        for (body, message) in cases {
            let error = #expect(throws: CachetWireError.self) { try prefixes(body) }
            #expect(error?.code == .malformedBody && error?.message == message, "\(message)")
        }
        let command = CachetCommand.clearPrefixes([Array("a:".utf8), Array("c".utf8)])
        let bytes = command.encoded(id: 7)
        let decoded = try bytes.withUnsafeBytes { buffer in
            try CachetCommand.decode(
                frame: try #require(try CachetFrameDecoder.decodeFrame(in: buffer, at: 0)),
                in: buffer
            )
        }
        #expect(decoded == command)
    }

    @Test(arguments: [CachetOpcode.stats, .ping])
    func emptyBodyOpcodesRefuseABody(opcode: CachetOpcode) {
        let bytes = Self.request(opcode, body: [])
        #expect(decodeOne(bytes) != nil && Self.error(bytes) == nil)
        for length in [1, 2, 100] {
            let error = Self.error(Self.request(opcode, body: [UInt8](repeating: 0, count: length)))
            #expect(error?.code == .malformedBody && error?.status == .badRequest && error?.closesConnection == false)
            #expect(error?.message == "this opcode takes an empty body, got \(length) bytes")
        }
    }

    /// Header errors win over body errors, and the version over the opcode.
    @Test func headerErrorsComeBeforeBodyErrors() {
        var bytes = Self.request(.get, body: Self.keyBody(declared: 0, actual: 0))
        bytes[4] = 2
        #expect(Self.error(bytes)?.code == .unsupportedVersion)
        bytes[4] = 1
        bytes[5] = 0x42
        #expect(Self.error(bytes)?.code == .unknownOpcode)
        #expect(Self.error(bytes)?.message == "unknown opcode 0x42")
    }

    /// Reserved flags do not change how a request decodes (`range` does: its body carries the range).
    @Test func flagsAreIgnored() {
        var bytes = CachetCommand.get(key: [1]).encoded(id: 4)
        bytes[6] = 0xef
        bytes[7] = 0xff
        #expect(decodeOne(bytes) == .command(.get(key: [1]), bytes: bytes))
    }
}
