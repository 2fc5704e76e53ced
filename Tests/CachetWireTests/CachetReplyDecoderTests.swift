import CachetWire
import Testing

@Suite struct CachetReplyDecoderTests {
    let replies: [CachetResponse] = [
        CachetResponse(opcode: .get, status: .ok, id: 7, body: Array("value".utf8)),
        CachetResponse(opcode: .get, status: .notFound, id: 8),
        CachetResponse(opcode: .put, status: .ok, id: 9),
        CachetResponse(opcode: .stats, status: .ok, id: 10, body: [UInt8](repeating: 0x7b, count: 3000)),
    ]

    /// Feeds the encoded replies in chunks of `chunk` bytes, decoding in place as they arrive.
    func decodeInChunks(_ bytes: [UInt8], chunk: Int) throws -> [CachetResponse] {
        var decoded: [CachetResponse] = []
        var received: [UInt8] = []
        var offset = 0
        var index = 0
        while index < bytes.count {
            received.append(contentsOf: bytes[index..<min(bytes.count, index + chunk)])
            index += chunk
            try received.withUnsafeBytes { buffer in
                while let frame = try CachetReplyDecoder.decodeReply(in: buffer, at: offset) {
                    decoded.append(CachetResponse(frame: frame, in: buffer))
                    offset = frame.end
                }
            }
        }
        #expect(offset == bytes.count)
        return decoded
    }

    @Test(arguments: [1, 2, 3, 5, 11, 12, 13, 64, 1000, 100_000])
    func decodesRepliesAtEveryChunkSize(chunk: Int) throws {
        let bytes = replies.flatMap(\.encoded)
        #expect(try decodeInChunks(bytes, chunk: chunk) == replies)
    }

    @Test func aPartialReplyConsumesNothing() throws {
        let bytes = replies[0].encoded
        for count in 0..<bytes.count {
            let frame = try Array(bytes.prefix(count)).withUnsafeBytes { try CachetReplyDecoder.decodeReply(in: $0) }
            #expect(frame == nil)
        }
    }

    @Test(arguments: [0, 3, 7])
    func aLengthBelowTheHeaderFailsAsSoonAsThePrefixArrives(length: UInt32) {
        let prefix = withUnsafeBytes(of: length.bigEndian) { Array($0) }
        #expect {
            try prefix.withUnsafeBytes { try CachetReplyDecoder.decodeReply(in: $0) }
        } throws: { error in
            let error = error as? CachetWireError
            return error?.code == .payloadTooShort && error?.message.contains("\(length) bytes") == true
        }
    }

    @Test func aLengthAboveTheLimitFailsAsSoonAsThePrefixArrives() {
        let prefix = withUnsafeBytes(of: UInt32.max.bigEndian) { Array($0) }
        #expect {
            try prefix.withUnsafeBytes { try CachetReplyDecoder.decodeReply(in: $0) }
        } throws: { error in
            let error = error as? CachetWireError
            return error?.code == .payloadTooLarge && error?.message.contains("4294967295") == true
        }
        let large = withUnsafeBytes(of: UInt32(1000).bigEndian) { Array($0) }
        #expect(throws: CachetWireError.self) {
            try large.withUnsafeBytes { try CachetReplyDecoder.decodeReply(in: $0, maximumPayloadLength: 999) }
        }
        #expect(throws: Never.self) {
            try large.withUnsafeBytes { try CachetReplyDecoder.decodeReply(in: $0, maximumPayloadLength: 1000) }
        }
    }

    @Test func anotherVersionIsFramedButFailsValidation() throws {
        let bytes = CachetResponse(opcode: .ping, status: .ok, id: 1, version: 2).encoded
        let frame = try #require(try bytes.withUnsafeBytes { try CachetReplyDecoder.decodeReply(in: $0) })
        #expect(frame.header.version == 2)
        #expect(throws: Never.self) {
            try CachetReplyDecoder.validateReplyHeader(CachetFrameHeader(opcode: .ping, word: 0, id: 1))
        }
        #expect {
            try CachetReplyDecoder.validateReplyHeader(frame.header)
        } throws: { error in
            (error as? CachetWireError)?.code == .malformedReply
        }
    }
}
