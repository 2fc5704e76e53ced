import CachetTestSupport
import CachetWire
import Testing

@Suite("Random round trips")
struct CachetCommandPropertyTests {
    static func randomBytes(_ count: Int, _ random: inout SplitMix64) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    static func randomCommand(_ random: inout SplitMix64) -> CachetCommand {
        // Keys favour the edges: 1 byte, around 255/256, and 4096.
        let keyLengths = [1, 2, 255, 256, 4095, 4096]
        let keyLength =
            random.next() % 4 == 0
            ? keyLengths[Int(random.next() % UInt64(keyLengths.count))] : Int(random.next() % 64) + 1
        let key = randomBytes(keyLength, &random)
        switch random.next() % 6 {
        case 0:
            let value = randomBytes(random.next() % 5 == 0 ? 0 : Int(random.next() % 2000), &random)
            let ttl: UInt32 = random.next() % 3 == 0 ? 0 : UInt32(truncatingIfNeeded: random.next())
            return .put(key: key, value: value, ttl: ttl)
        case 1: return .get(key: key)
        case 2: return .delete(key: key)
        case 3: return .clear
        case 4: return .stats
        default: return .ping
        }
    }

    /// Random commands encode to frames of the right length that decode to the same command, alone and
    /// streamed together in random chunks.
    @Test(arguments: [UInt64(1), 2, 3, 0xdead_beef])
    func commandsRoundTrip(seed: UInt64) throws {
        var random = SplitMix64(state: seed)
        var stream: [UInt8] = []
        var expected: [DecodedRequest] = []
        for _ in 0..<300 {
            let command = Self.randomCommand(&random)
            let id = UInt32(truncatingIfNeeded: random.next())
            let bytes = command.encoded(id: id)
            let length = bytes.prefix(4).reduce(0) { $0 << 8 | Int($1) }
            #expect(length == bytes.count - 4)
            let frame = try #require(try decodeFrame(bytes))
            #expect(frame.header == CachetFrameHeader(opcode: command.opcode, word: 0, id: id))
            #expect(frame.end == bytes.count)
            let decoded = try bytes.withUnsafeBytes { try CachetCommand.decode(frame: frame, in: $0) }
            #expect(decoded == command)
            stream += bytes
            expected.append(.command(command, bytes: bytes))
        }
        let whole = decodeRequests(stream)
        #expect(whole == DecodedStream(requests: expected, consumed: stream.count))
        #expect(ChunkedReceiver.feed(stream, sizes: { _ in Int(random.next() % 5000) + 1 }) == whole)
    }

    /// Random responses round-trip, and a stream of them decodes in order.
    @Test(arguments: [UInt64(7), 8])
    func responsesRoundTrip(seed: UInt64) throws {
        var random = SplitMix64(state: seed)
        var stream: [UInt8] = []
        var responses: [CachetResponse] = []
        for _ in 0..<200 {
            let response = CachetResponse(
                opcode: CachetOpcode(rawValue: UInt8(truncatingIfNeeded: random.next())),
                status: CachetStatus(rawValue: UInt16(truncatingIfNeeded: random.next() % 9)),
                id: UInt32(truncatingIfNeeded: random.next()),
                body: Self.randomBytes(Int(random.next() % 300), &random)
            )
            response.encode(to: &stream)
            responses.append(response)
        }
        var offset = 0
        var decoded: [CachetResponse] = []
        while let next = try stream.withUnsafeBytes({ try CachetResponse.decode(from: $0, at: offset) }) {
            decoded.append(next.response)
            offset = next.end
        }
        #expect(decoded == responses && offset == stream.count)
    }

    /// Random bytes never crash the decoder, never report a frame past the buffer, and every frame it
    /// reports decodes to a command or a non-fatal error.
    @Test(arguments: [UInt64(11), 12, 13])
    func randomBytesAreHandled(seed: UInt64) throws {
        var random = SplitMix64(state: seed)
        for _ in 0..<2000 {
            var bytes = Self.randomBytes(Int(random.next() % 40), &random)
            if bytes.count >= 12 && random.next() % 2 == 0 {
                // Mostly plausible lengths, so that the header and body checks are reached.
                let length = bytes.count - 4 - Int(random.next() % 3)
                bytes[0...3] = [0, 0, UInt8(max(0, length) >> 8), UInt8(max(0, length) & 0xff)]
                bytes[4] = random.next() % 4 == 0 ? bytes[4] : 1
            }
            let decoded = decodeRequests(bytes)
            #expect(decoded.consumed <= bytes.count)
            for request in decoded.requests {
                if case .bodyError(let error, _) = request { #expect(!error.closesConnection) }
                if case .framingError(let error) = request { #expect(error.closesConnection) }
            }
        }
    }
}
