import CachetTestSupport
import CachetWire
import Testing

@Suite("Frame decoder: framing, limits, partial frames")
struct CachetFrameDecoderTests {
    static let defaultMaximum = CachetProtocol.defaultMaximumPayloadLength

    @Test func constantsAreTheSpecification() {
        #expect(CachetProtocol.version == 1)
        #expect(CachetProtocol.lengthPrefixSize == 4 && CachetProtocol.headerSize == 8)
        #expect(CachetProtocol.frameOverhead == 12 && CachetProtocol.minimumPayloadLength == 8)
        #expect(CachetProtocol.maximumKeyLength == 4096)
        #expect(CachetProtocol.defaultMaximumPayloadLength == 67_108_864)
        #expect(CachetProtocol.putBodyPrefixSize == 6 && CachetProtocol.keyBodyPrefixSize == 2)
        #expect(CachetProtocol.clearReplySize == 16)
    }

    @Test func headerFieldsAreReadBigEndian() throws {
        let bytes: [UInt8] = [0, 0, 0, 10, 0x01, 0x05, 0xab, 0xcd, 0x12, 0x34, 0x56, 0x78, 0xee, 0xff]
        let frame = try #require(try decodeFrame(bytes))
        #expect(frame.header == CachetFrameHeader(version: 1, opcode: .stats, word: 0xabcd, id: 0x1234_5678))
        #expect(frame.header.flags == 0xabcd && frame.header.status.rawValue == 0xabcd)
        #expect(frame.body == 12..<14 && frame.end == 14)
    }

    @Test func theHeaderOfAFrameStillArrivingIsReadOnceItsTwelveBytesAreIn() {
        // A frame announcing 1,000 bytes of payload, of which only the header and two body bytes are here.
        let bytes: [UInt8] = [0xaa, 0, 0, 0x03, 0xe8, 0x01, 0x01, 0, 0, 0, 0, 0, 7, 0x11, 0x22]
        let expected = CachetFrameHeader(version: 1, opcode: .put, word: 0, id: 7)
        #expect(CachetFrameDecoder.decodeHeader(in: UnsafeRawBufferPointer(start: nil, count: 0)) == nil)
        for end in 1..<13 {
            bytes.withUnsafeBytes {
                #expect(CachetFrameDecoder.decodeHeader(in: .init(rebasing: $0[..<end]), at: 1) == nil)
            }
        }
        for end in 13...bytes.count {
            bytes.withUnsafeBytes {
                #expect(CachetFrameDecoder.decodeHeader(in: .init(rebasing: $0[..<end]), at: 1) == expected)
            }
        }
        // The whole frame is not there, so the frame decoder still waits.
        #expect((try? decodeFrame(bytes, at: 1)) == .some(nil))
    }

    @Test func aFrameIsFoundAtAnOffset() throws {
        let bytes: [UInt8] = [0xaa, 0xbb, 0, 0, 0, 8, 1, 6, 0, 0, 0, 0, 0, 9]
        let frame = try #require(try decodeFrame(bytes, at: 2))
        #expect(frame.header.id == 9 && frame.body == 14..<14 && frame.end == 14)
        #expect(try decodeFrame(bytes, at: 14) == nil)
    }

    /// The decoder never reports a frame before its last byte has arrived, and reports it as soon as it has.
    @Test(arguments: [
        CachetCommand.get(key: [1, 2, 3]), .put(key: [7], value: [UInt8](repeating: 9, count: 300), ttl: 5), .ping,
    ])
    func partialFramesNeedMoreBytes(command: CachetCommand) throws {
        let frame = command.encoded(id: 9)
        for cut in 0..<frame.count {
            #expect(try decodeFrame(Array(frame.prefix(cut))) == nil, "cut at \(cut)")
        }
        #expect(try decodeFrame(frame)?.end == frame.count)
        #expect(try decodeFrame(frame + [0, 0])?.end == frame.count)
    }

    /// `length` is judged from the 4-byte prefix alone: nothing after it needs to have arrived.
    @Test func aHugeLengthPrefixThrowsAtOnce() throws {
        let error = frameError([0xff, 0xff, 0xff, 0xff])
        #expect(error?.code == .payloadTooLarge)
        #expect(error?.status == .tooLarge && error?.closesConnection == true)
        #expect(error?.message == "frame of 4294967295 bytes exceeds --max-frame 67108864")
        // Fewer than 4 bytes of a length prefix are not judged yet.
        #expect(frameError([0xff, 0xff, 0xff]) == nil)
        #expect(try decodeFrame([0xff, 0xff, 0xff]) == nil)
    }

    @Test(arguments: 0...7)
    func aPayloadShorterThanTheHeaderThrowsFromThePrefix(length: Int) {
        let error = frameError([0, 0, 0, UInt8(length)])
        #expect(error?.code == .payloadTooShort)
        #expect(error?.status == .badRequest && error?.closesConnection == true)
        #expect(error?.message == "payload of \(length) bytes is shorter than the 8-byte header")
    }

    @Test func aPayloadOfExactlyTheHeaderIsAFrameWithAnEmptyBody() throws {
        let frame = try #require(try decodeFrame([0, 0, 0, 8, 1, 6, 0, 0, 0, 0, 0, 1]))
        #expect(frame.header == CachetFrameHeader(opcode: .ping, word: 0, id: 1))
        #expect(frame.body.isEmpty && frame.end == 12)
    }

    @Test func theDefaultMaximumIsInclusive() throws {
        // 0x04000000 = 67108864: accepted, waiting for the payload; one more is refused at once.
        #expect(try decodeFrame([0x04, 0x00, 0x00, 0x00, 1, 1]) == nil)
        let error = frameError([0x04, 0x00, 0x00, 0x01])
        #expect(error?.code == .payloadTooLarge)
        #expect(error?.message == "frame of 67108865 bytes exceeds --max-frame 67108864")
    }

    @Test func aPayloadOfExactlyTheDefaultMaximumDecodes() throws {
        let maximum = Self.defaultMaximum
        var bytes = [UInt8](repeating: 0, count: 4 + maximum)
        bytes[0...11] = [0x04, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 3]
        // A PUT: ttl 0, key_len 1, key 'k', and a value filling the rest of the largest payload.
        bytes[12...18] = [0, 0, 0, 0, 0, 1, 0x6b]
        let frame = try #require(try decodeFrame(bytes))
        #expect(frame.end == bytes.count && frame.body.count == maximum - 8)
        let command = try bytes.withUnsafeBytes { try CachetCommand.decode(frame: frame, in: $0) }
        guard case .put(let key, let value, let ttl) = command else {
            Issue.record("decoded \(command.opcode)")
            return
        }
        #expect(key == [0x6b] && ttl == 0)
        #expect(value.count == maximum - 8 - 6 - 1)
        #expect(command.encoded(id: 3) == bytes)
        #expect(frameError(Array(bytes.prefix(4)), maximum: maximum - 1)?.code == .payloadTooLarge)
    }

    @Test(arguments: [8, 9, 100, 4096])
    func aConfiguredMaximumIsInclusive(maximum: Int) throws {
        var atMaximum: [UInt8] = [0, 0, UInt8(maximum >> 8), UInt8(maximum & 0xff), 1, 6, 0, 0, 0, 0, 0, 1]
        atMaximum += [UInt8](repeating: 0, count: maximum - 8)
        #expect(try decodeFrame(atMaximum, maximum: maximum)?.body.count == maximum - 8)
        let over = maximum + 1
        let error = frameError([0, 0, UInt8(over >> 8), UInt8(over & 0xff)], maximum: maximum)
        #expect(error?.code == .payloadTooLarge)
        #expect(error?.message == "frame of \(over) bytes exceeds --max-frame \(maximum)")
    }

    /// The header is not validated by the frame decoder: a node must still answer it (echoing it).
    @Test func anyVersionAndOpcodeFrameAlike() throws {
        let frame = try #require(try decodeFrame([0, 0, 0, 9, 0xfe, 0xee, 0x80, 0x01, 0, 0, 0, 4, 0x33]))
        #expect(frame.header.version == 0xfe && frame.header.opcode.rawValue == 0xee && frame.header.flags == 0x8001)
        #expect(frame.body == 12..<13)
    }

    @Test func requestHeadersAreCheckedVersionFirst() {
        func check(_ version: UInt8, _ opcode: UInt8) -> CachetWireError? {
            do throws(CachetWireError) {
                try CachetFrameDecoder.validateRequestHeader(
                    CachetFrameHeader(version: version, opcode: CachetOpcode(rawValue: opcode), word: 0, id: 0)
                )
                return nil
            } catch {
                return error
            }
        }
        for opcode in UInt8(1)...7 {
            #expect(check(1, opcode) == nil)
        }
        #expect(check(1, 0x0b)?.message == "unknown opcode 0x0b")
        #expect(check(1, 0x00)?.code == .unknownOpcode)
        #expect(check(1, 0xff)?.message == "unknown opcode 0xff")
        #expect(check(2, 0x02)?.code == .unsupportedVersion)
        // An unknown opcode in an unknown version is an unsupported version.
        let both = check(0, 0x77)
        #expect(both?.code == .unsupportedVersion && both?.status == .unsupportedVersion)
        #expect(both?.message == "protocol version 0 is not supported; this node speaks version 1")
        #expect(both?.closesConnection == false)
    }

    /// Frames back to back decode one after the other from each frame's `end`.
    @Test func backToBackFramesDecodeInOrder() throws {
        var stream: [UInt8] = []
        for id in UInt32(0)..<50 {
            CachetCommand.get(key: Array("key-\(id)".utf8)).encode(id: id, to: &stream)
        }
        var offset = 0
        var ids: [UInt32] = []
        while let frame = try decodeFrame(stream, at: offset) {
            ids.append(frame.header.id)
            offset = frame.end
        }
        #expect(ids == Array(0..<50) && offset == stream.count)
    }
}
