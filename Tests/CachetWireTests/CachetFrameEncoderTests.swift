import CachetWire
import Testing

@Suite("Frame encoder: exact bytes")
struct CachetFrameEncoderTests {
    @Test func putIsLengthHeaderTTLKeyLengthKeyValue() {
        let bytes = CachetCommand.put(key: Array("k1".utf8), value: Array("hello".utf8), ttl: 0x0102_0304)
            .encoded(id: 0xa1b2_c3d4)
        #expect(
            bytes == [
                0x00, 0x00, 0x00, 0x15, 0x01, 0x01, 0x00, 0x00, 0xa1, 0xb2, 0xc3, 0xd4,
                0x01, 0x02, 0x03, 0x04, 0x00, 0x02, 0x6b, 0x31, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
            ]
        )
    }

    @Test func getAndDeleteAreLengthHeaderKeyLengthKey() {
        #expect(
            CachetCommand.get(key: [0x00, 0xff]).encoded(id: 7)
                == [0, 0, 0, 0x0c, 1, 2, 0, 0, 0, 0, 0, 7, 0x00, 0x02, 0x00, 0xff]
        )
        #expect(
            CachetCommand.delete(key: [0x6b]).encoded(id: 0xffff_ffff)
                == [0, 0, 0, 0x0b, 1, 3, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x00, 0x01, 0x6b]
        )
    }

    @Test(arguments: [(CachetCommand.clear, UInt8(4)), (.stats, 5), (.ping, 6)])
    func emptyBodyCommandsAreTwelveBytes(command: CachetCommand, opcode: UInt8) {
        #expect(command.encoded(id: 0x0102_0304) == [0, 0, 0, 8, 1, opcode, 0, 0, 1, 2, 3, 4])
        #expect(command.opcode.rawValue == opcode)
    }

    @Test func encodeAppendsToWhatIsThere() {
        var output: [UInt8] = [0xee]
        CachetCommand.ping.encode(id: 1, to: &output)
        CachetCommand.ping.encode(id: 2, to: &output)
        #expect(output == [0xee, 0, 0, 0, 8, 1, 6, 0, 0, 0, 0, 0, 1, 0, 0, 0, 8, 1, 6, 0, 0, 0, 0, 0, 2])
    }

    @Test func responseCarriesVersionOpcodeStatusIdAndBody() {
        let response = CachetResponse(opcode: .get, status: .notFound, id: 0x0a0b_0c0d, body: [0x41])
        #expect(response.encoded == [0, 0, 0, 9, 1, 2, 0, 1, 0x0a, 0x0b, 0x0c, 0x0d, 0x41])
        let future = CachetResponse(opcode: .none, status: CachetStatus(rawValue: 0x1234), id: 0, version: 9)
        #expect(future.encoded == [0, 0, 0, 8, 9, 0, 0x12, 0x34, 0, 0, 0, 0])
    }

    @Test func writePrefixAndHeaderWritesTwelveBytes() {
        var bytes = [UInt8](repeating: 0xaa, count: 14)
        bytes.withUnsafeMutableBytes { buffer in
            CachetFrameEncoder.writePrefixAndHeader(
                to: buffer.baseAddress! + 1,
                bodyLength: 0x0100,
                header: CachetFrameHeader(opcode: .clear, word: CachetStatus.unavailable.rawValue, id: 0x0102_0304)
            )
        }
        #expect(bytes == [0xaa, 0, 0, 0x01, 0x08, 1, 4, 0, 7, 1, 2, 3, 4, 0xaa])
    }

    @Test func bigEndianIntegers() {
        var output: [UInt8] = []
        CachetFrameEncoder.appendBigEndian(UInt16(0x0102), to: &output)
        CachetFrameEncoder.appendBigEndian(UInt32(0x0304_0506), to: &output)
        CachetFrameEncoder.appendBigEndian(UInt64(0x0708_090a_0b0c_0d0e), to: &output)
        #expect(output == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14])
    }

    /// A length the format cannot carry is announced as the ceiling, which a node refuses as TOO_LARGE,
    /// never as a shorter length that would make the payload's tail look like further frames.
    @Test func anOverlongPayloadLengthSaturates() {
        var bytes = [UInt8](repeating: 0, count: CachetProtocol.frameOverhead)
        bytes.withUnsafeMutableBytes { buffer in
            CachetFrameEncoder.writePrefixAndHeader(
                to: buffer.baseAddress!,
                bodyLength: Int(UInt32.max) + 100,
                header: CachetFrameHeader(opcode: .put, word: 0, id: 1)
            )
        }
        #expect(Array(bytes.prefix(4)) == [0xff, 0xff, 0xff, 0xff])
    }

    /// A key over 65535 bytes is announced as 65535 bytes: refused as TOO_LARGE rather than read as a
    /// shorter key with the rest of its bytes taken for the value.
    @Test(arguments: [65_536, 65_537, 70_000])
    func anOverlongKeyIsRefusedNotTruncated(keyLength: Int) throws {
        let key = [UInt8](repeating: 0x61, count: keyLength)
        for command in [CachetCommand.put(key: key, value: [1, 2, 3], ttl: 0), .get(key: key), .delete(key: key)] {
            let bytes = command.encoded(id: 5)
            let keyLengthOffset = command.opcode == .put ? 16 : 12
            #expect(bytes[keyLengthOffset] == 0xff && bytes[keyLengthOffset + 1] == 0xff)
            let outcome = decodeOne(bytes)
            guard case .bodyError(let error, _) = outcome else {
                Issue.record("\(command.opcode) with a \(keyLength)-byte key decoded as \(outcome)")
                continue
            }
            #expect(error.code == .keyTooLong && error.status == .tooLarge && !error.closesConnection)
        }
    }
}
