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
