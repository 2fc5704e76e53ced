import CachetTestSupport
import CachetWire
import Testing

@Suite("Opcodes, statuses, errors, CLEAR results, responses")
struct CachetWireValueTests {
    @Test(
        arguments: [
            (UInt8(0x00), "NONE", false), (0x01, "PUT", true), (0x02, "GET", true), (0x03, "DEL", true),
            (0x04, "CLEAR", true), (0x05, "STATS", true), (0x06, "PING", true), (0x07, "AUTH", true),
            (0x08, "WATCH", true), (0x09, "UNWATCH", true), (0x0a, "EVENT", false), (0x0b, "0x0b", false),
            (0x7f, "0x7f", false), (0xab, "0xab", false), (0xff, "0xff", false),
        ]
    )
    func opcodeDescriptions(raw: UInt8, name: String, known: Bool) {
        let opcode = CachetOpcode(rawValue: raw)
        #expect(opcode.description == name)
        #expect(opcode.isKnown == known)
        #expect(CachetOpcode.allKnown.contains(opcode) == known)
    }

    @Test func namedOpcodesHaveTheirBytes() {
        #expect(
            [CachetOpcode.put, .get, .delete, .clear, .stats, .ping, .auth, .none].map(\.rawValue)
                == [1, 2, 3, 4, 5, 6, 7, 0]
        )
        #expect(CachetOpcode.allKnown.map(\.rawValue) == [1, 2, 3, 4, 5, 6, 7, 8, 9])
    }

    @Test(
        arguments: [
            (CachetStatus.ok, UInt16(0), "OK"), (.notFound, 1, "NOT_FOUND"), (.badRequest, 2, "BAD_REQUEST"),
            (.tooLarge, 3, "TOO_LARGE"), (.unknownOpcode, 4, "UNKNOWN_OPCODE"),
            (.unsupportedVersion, 5, "UNSUPPORTED_VERSION"), (.serverError, 6, "SERVER_ERROR"),
            (.unavailable, 7, "UNAVAILABLE"), (.notAuthenticated, 8, "NOT_AUTHENTICATED"), (.forbidden, 9, "FORBIDDEN"),
            (.notStored, 10, "NOT_STORED"), (.rangeNotSatisfiable, 11, "RANGE_NOT_SATISFIABLE"),
            (.continues, 12, "CONTINUES"), (.exists, 13, "EXISTS"),
        ]
    )
    func statusValuesAndNames(status: CachetStatus, raw: UInt16, name: String) {
        #expect(status.rawValue == raw)
        #expect(status.description == name)
        #expect(CachetStatus(rawValue: raw) == status)
    }

    @Test func unknownStatusesAreRepresentable() {
        #expect(CachetStatus(rawValue: 14).description == "STATUS_14")
        #expect(CachetStatus(rawValue: 65535).description == "STATUS_65535")
    }

    @Test(
        arguments: [
            (CachetWireError.Code.payloadTooShort, CachetStatus.badRequest, true, "payloadTooShort"),
            (.payloadTooLarge, .tooLarge, true, "payloadTooLarge"),
            (.malformedBody, .badRequest, false, "malformedBody"),
            (.emptyKey, .badRequest, false, "emptyKey"),
            (.keyTooLong, .tooLarge, false, "keyTooLong"),
            (.unsupportedVersion, .unsupportedVersion, false, "unsupportedVersion"),
            (.unknownOpcode, .unknownOpcode, false, "unknownOpcode"),
            (.malformedReply, .badRequest, false, "malformedReply"),
        ]
    )
    func errorCodesMapToStatusesAndClosing(code: CachetWireError.Code, status: CachetStatus, closes: Bool, name: String)
    {
        let error = CachetWireError(code: code, message: "what went wrong")
        #expect(error.status == status)
        #expect(error.closesConnection == closes)
        #expect(code.description == name)
        #expect(error.description == "\(name): what went wrong")
    }

    @Test func clearResultRoundTrip() throws {
        let result = CachetClearResult(items: 0x0102_0304_0506_0708, bytes: 0xf0e0_d0c0_b0a0_9080)
        #expect(result.encoded == [1, 2, 3, 4, 5, 6, 7, 8, 0xf0, 0xe0, 0xd0, 0xc0, 0xb0, 0xa0, 0x90, 0x80])
        #expect(try CachetClearResult(decoding: result.encoded) == result)
        #expect(CachetClearResult(items: 2, bytes: 11).encoded == [0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 11])
        let extremes = CachetClearResult(items: .max, bytes: 0)
        #expect(try CachetClearResult(decoding: extremes.encoded) == extremes)
    }

    @Test(arguments: [0, 1, 8, 15, 17, 32])
    func aClearReplyOfTheWrongSizeIsMalformed(size: Int) {
        do throws(CachetWireError) {
            _ = try CachetClearResult(decoding: [UInt8](repeating: 1, count: size))
            Issue.record("a \(size)-byte CLEAR reply decoded")
        } catch {
            #expect(error.code == .malformedReply)
            #expect(error.message == "CLEAR reply of \(size) bytes, expected 16")
            #expect(!error.closesConnection)
        }
    }

    @Test func responsesDecodeWhenWholeAndReportTheirEnd() throws {
        let reply = CachetResponse(opcode: .get, status: .ok, id: 77, body: Array("value".utf8))
        let bytes = reply.encoded + [0, 0]
        for cut in 0..<(bytes.count - 2) {
            #expect(try Array(bytes.prefix(cut)).withUnsafeBytes { try CachetResponse.decode(from: $0) } == nil)
        }
        let decoded = try #require(try bytes.withUnsafeBytes { try CachetResponse.decode(from: $0) })
        #expect(decoded.response == reply && decoded.end == bytes.count - 2)
        #expect(decoded.response.bodyText == "value")
    }

    @Test func responsesKeepVersionsAndStatusesTheyDoNotKnow() throws {
        let bytes: [UInt8] = [0, 0, 0, 9, 2, 0x33, 0x01, 0x00, 0, 0, 0, 5, 0x21]
        let decoded = try #require(try bytes.withUnsafeBytes { try CachetResponse.decode(from: $0) })
        #expect(decoded.response.version == 2 && decoded.response.opcode.rawValue == 0x33)
        #expect(decoded.response.status.rawValue == 256 && decoded.response.id == 5)
        #expect(decoded.response.encoded == bytes)
    }

    @Test func aResponseLengthBelowTheHeaderIsMalformedFraming() {
        let bytes: [UInt8] = [0, 0, 0, 2, 1, 1]
        #expect(throws: CachetWireError.self) { try bytes.withUnsafeBytes { try CachetResponse.decode(from: $0) } }
    }

    @Test func bodyTextReplacesInvalidUTF8() {
        #expect(CachetResponse(opcode: .none, status: .badRequest, id: 0, body: [0x61, 0xff]).bodyText == "a\u{FFFD}")
    }
}
