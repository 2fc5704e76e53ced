import CachetWire
import Testing

/// The hold check's bytes (`Protocol/PROTOCOL.md`, "Request flags", `holdCheck`), and its body's errors.
@Suite("Hold check")
struct CachetHoldCheckTests {
    @Test func theRequestIsAPingWithItsFlagsAndALengthPrefixedId() throws {
        let frame = CachetHoldCheck(memberID: "n1", membershipHash: "ab").encoded(id: 7)
        // length 14 (8 header + 6 body), version 1, PING 0x06, flags forwarded|holdCheck, id 7, body.
        #expect(frame == [0, 0, 0, 14, 1, 6, 0x04, 0x01, 0, 0, 0, 7, 0, 2, 0x6e, 0x31, 0x61, 0x62])
        try frame.withUnsafeBytes { buffer in
            let decoded = try CachetHoldCheck.decode(in: buffer, body: 12..<frame.count)
            #expect(decoded == CachetHoldCheck(memberID: "n1", membershipHash: "ab"))
        }
    }

    @Test(arguments: [[UInt8](), [0], [0, 0], [0, 3, 0x6e, 0x31]])
    func aBodyShorterThanItsIdLengthIsMalformed(body: [UInt8]) {
        _ = body.withUnsafeBytes { buffer in
            #expect(throws: CachetWireError.self) { try CachetHoldCheck.decode(in: buffer, body: 0..<body.count) }
        }
    }

    @Test func aViewCheckIsAPingNamingTheMemberAskedAbout() throws {
        let frame = CachetViewCheck(memberID: "n2").encoded(id: 5)
        #expect(frame == [0, 0, 0, 10, 1, 6, 0x08, 0x01, 0, 0, 0, 5, 0x6e, 0x32])
        let decoded = try frame.withUnsafeBytes { try CachetViewCheck.decode(in: $0, body: 12..<frame.count) }
        #expect(decoded == CachetViewCheck(memberID: "n2"))
        _ = frame.withUnsafeBytes { buffer in
            #expect(throws: CachetWireError.self) { try CachetViewCheck.decode(in: buffer, body: 12..<12) }
        }
        #expect("\(CachetViewCheck.Answer.down)" == "down" && CachetViewCheck.Answer.down.rawValue == 1)
    }

    @Test func answersHaveNamesAndUnknownBytesAreNotClear() {
        #expect(CachetHoldCheck.Answer.clear.rawValue == 0 && CachetHoldCheck.Answer.otherMembership.rawValue == 3)
        #expect(CachetHoldCheck.Answer(rawValue: 9) != .clear)
        #expect("\(CachetHoldCheck.Answer.owesInvalidations)" == "owesInvalidations")
        #expect("\(CachetHoldCheck.Answer(rawValue: 9))" == "unknown(9)")
    }
}

/// The part of a value a GET of a range asks for (`Protocol/PROTOCOL.md`, "GET of a range"), and its body.
@Suite("Value ranges")
struct CachetValueRangeTests {
    @Test func boundsAreCutAtTheEndAndNoneStartsPastIt() {
        #expect(CachetValueRange(offset: 0, length: 10).bounds(total: 100) == 0..<10)
        #expect(CachetValueRange(offset: 99, length: 1).bounds(total: 100) == 99..<100)
        #expect(CachetValueRange(offset: 95, length: 10).bounds(total: 100) == 95..<100)
        #expect(CachetValueRange(offset: 40).bounds(total: 100) == 40..<100)
        #expect(CachetValueRange(offset: 100).bounds(total: 100) == 100..<100)
        #expect(CachetValueRange(offset: 7, length: 0).bounds(total: 100) == 7..<7)
        #expect(CachetValueRange(offset: 0).bounds(total: 0) == 0..<0)
        #expect(CachetValueRange(offset: 101, length: 1).bounds(total: 100) == nil)
        #expect(CachetValueRange(offset: .max, length: .max).bounds(total: 100) == nil)
        #expect(CachetValueRange(10..<20) == CachetValueRange(offset: 10, length: 10))
        #expect("\(CachetValueRange(offset: 10, length: 10))" == "10-19 (10 bytes)")
        #expect("\(CachetValueRange(offset: 10))" == "10-")
    }

    @Test func theRangeFollowsTheKeyAndTheBodyEndsThere() throws {
        let command = CachetCommand.rangedGet(key: [0x6b], range: CachetValueRange(offset: 2, length: 3))
        let bytes = command.encoded(id: 1)
        let header: [UInt8] = [0, 0, 0, 27, 1, 2, 0x10, 0, 0, 0, 0, 1]
        #expect(bytes == header + [0, 1, 0x6b] + [0, 0, 0, 0, 0, 0, 0, 2] + [0, 0, 0, 0, 0, 0, 0, 3])
        let frame = try bytes.withUnsafeBytes { try #require(try CachetFrameDecoder.decodeFrame(in: $0)) }
        #expect(try bytes.withUnsafeBytes { try CachetCommand.decode(frame: frame, in: $0) } == command)
        for cut in [1, 8, 16, 17] {
            let body = Array(bytes[12..<(bytes.count - cut)])
            _ = body.withUnsafeBytes { buffer in
                #expect(throws: CachetWireError.self) {
                    try CachetBodyDecoder.decodeRangedKey(in: buffer, body: 0..<body.count)
                }
            }
        }
        #expect(CachetValueRange.decodeReply([0, 0, 0, 0, 0, 0, 1, 0] + [0, 0, 0, 0, 0, 0, 0, 5, 9])! == (256, 5, 16))
        #expect(CachetValueRange.decodeReply([0, 0, 0, 0, 0, 0, 1, 0, 9]) == nil)
        #expect(CachetValueRange.decodeReply([0, 0, 0]) == nil)
    }
}
