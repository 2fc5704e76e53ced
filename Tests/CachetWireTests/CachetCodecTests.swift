import CachetTestSupport
import CachetWire
import Testing

@Suite("Codec boundaries and round trips")
struct CachetCodecTests {
    func decode(_ bytes: [UInt8], maximum: Int = CachetProtocol.defaultMaximumPayloadLength) throws(CachetWireError)
        -> CachetFrame?
    {
        let result: Result<CachetFrame?, CachetWireError> = bytes.withUnsafeBytes { buffer in
            Result { () throws(CachetWireError) in
                try CachetFrameDecoder.decodeFrame(in: buffer, maximumPayloadLength: maximum)
            }
        }
        return try result.get()
    }

    @Test func lengthLimitIsCheckedFromThePrefixAlone() {
        #expect(throws: CachetWireError.self) { try decode([0xff, 0xff, 0xff, 0xff]) }
        do {
            _ = try decode([0xff, 0xff, 0xff, 0xff])
        } catch {
            #expect(error.code == .payloadTooLarge)
            #expect(error.status == .tooLarge && error.closesConnection)
            #expect(error.message == "frame of 4294967295 bytes exceeds --max-frame 67108864")
        }
    }

    @Test func partialFramesNeedMoreBytes() throws {
        let frame = CachetCommand.get(key: [1, 2, 3]).encoded(id: 9)
        for cut in 0..<frame.count {
            #expect(try decode(Array(frame.prefix(cut))) == nil, "cut at \(cut)")
        }
        #expect(try decode(frame)?.end == frame.count)
    }

    @Test func payloadBoundaries() throws {
        // Exactly the header: a PING.
        #expect(
            try decode([0, 0, 0, 8, 1, 6, 0, 0, 0, 0, 0, 1])?.header == CachetFrameHeader(opcode: .ping, word: 0, id: 1)
        )
        // 7 bytes: too short, fatal.
        #expect(throws: CachetWireError.self) { try decode([0, 0, 0, 7]) }
        // Exactly the maximum passes; one more fails before any payload is present.
        let maximum = 100
        var atMaximum: [UInt8] = [0, 0, 0, UInt8(maximum), 1, 6, 0, 0, 0, 0, 0, 1]
        atMaximum += [UInt8](repeating: 0, count: maximum - 8)
        #expect(try decode(atMaximum, maximum: maximum)?.body.count == maximum - 8)
        #expect(throws: CachetWireError.self) { try decode([0, 0, 0, UInt8(maximum + 1)], maximum: maximum) }
    }

    @Test func clearResultRoundTrip() throws {
        let result = CachetClearResult(items: 0x0102_0304_0506_0708, bytes: 42)
        #expect(result.encoded == [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 42])
        #expect(try CachetClearResult(decoding: result.encoded) == result)
        #expect(throws: CachetWireError.self) { try CachetClearResult(decoding: [1, 2, 3]) }
    }

    @Test func descriptions() {
        #expect(CachetOpcode.put.description == "PUT")
        #expect(CachetOpcode.delete.description == "DEL")
        #expect(CachetOpcode(rawValue: 0xab).description == "0xab")
        #expect(CachetStatus.unsupportedVersion.description == "UNSUPPORTED_VERSION")
        #expect(CachetStatus(rawValue: 99).description == "STATUS_99")
        #expect(CachetOpcode.allKnown.allSatisfy { $0.isKnown })
        #expect(!CachetOpcode(rawValue: 7).isKnown)
    }

    @Test(arguments: [1, 2, 3])
    func randomCommandsRoundTrip(seed: UInt64) throws {
        var random = SplitMix64(state: seed)
        for _ in 0..<500 {
            let key = (0..<Int(random.next() % 40 + 1)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let value = (0..<Int(random.next() % 300)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let command: CachetCommand
            switch random.next() % 6 {
            case 0: command = .put(key: key, value: value, ttl: UInt32(truncatingIfNeeded: random.next()))
            case 1: command = .get(key: key)
            case 2: command = .delete(key: key)
            case 3: command = .clear
            case 4: command = .stats
            default: command = .ping
            }
            let id = UInt32(truncatingIfNeeded: random.next())
            let bytes = command.encoded(id: id)
            let decodedFrame = try decode(bytes)
            let frame = try #require(decodedFrame)
            #expect(frame.header.id == id)
            #expect(frame.end == bytes.count)
            let decoded = try bytes.withUnsafeBytes { try CachetCommand.decode(frame: frame, in: $0) }
            #expect(decoded == command)
            let response = CachetResponse(opcode: command.opcode, status: .ok, id: id, body: value)
            #expect(try response.encoded.withUnsafeBytes { try CachetResponse.decode(from: $0) }?.response == response)
        }
    }
}
