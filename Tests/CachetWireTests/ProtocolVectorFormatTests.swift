import CachetTestSupport
import Testing

@Suite("Vector file format")
struct ProtocolVectorFormatTests {
    @Test func readsEveryKindOfLine() throws {
        let text = """
            # A comment line; blank lines are skipped.

            > 0000000f 01 02 0000 00000007 0003 6b6579     # trailing comment
            <   00000008 01 02 0001 00000007
            <~ 01 05 0000 00000003
            >0000000801060000 00000001\r
            !   shutdown
            ! close
            """
        let vector = try ProtocolVector.parse(name: "sample", text: text)
        #expect(
            vector.steps == [
                .send([0, 0, 0, 0x0f, 1, 2, 0, 0, 0, 0, 0, 7, 0, 3, 0x6b, 0x65, 0x79]),
                .expect([0, 0, 0, 8, 1, 2, 0, 1, 0, 0, 0, 7]),
                .expectHeader([1, 5, 0, 0, 0, 0, 0, 3]),
                .send([0, 0, 0, 8, 1, 6, 0, 0, 0, 0, 0, 1]),
                .shutdown,
                .close,
            ]
        )
        #expect(vector.name == "sample" && vector.description == "sample")
        #expect(vector.sentBytes.count == 17 + 12)
        #expect(vector.closes)
    }

    @Test func hexDigitsMayBeUpperCase() throws {
        let vector = try ProtocolVector.parse(name: "upper", text: "> 0A ff Bc\n")
        #expect(vector.steps == [.send([0x0a, 0xff, 0xbc])])
    }

    @Test func expectedRepliesKnowWhetherACloseFollows() throws {
        let vector = try ProtocolVector.parse(
            name: "replies",
            text: """
                > 00
                < 00000008 01 06 0000 00000001
                <~ 01 05 0000 00000002
                < 00000008 01 00 0002 00000000
                ! close
                """
        )
        let replies = vector.expectedReplies
        #expect(replies.map(\.closesAfter) == [false, false, true])
        #expect(
            replies.map(\.header) == [[1, 6, 0, 0, 0, 0, 0, 1], [1, 5, 0, 0, 0, 0, 0, 2], [1, 0, 0, 2, 0, 0, 0, 0]]
        )
    }

    @Test(
        arguments: [
            ("> 0", 1, "odd number of hex digits"),
            ("\n\n< 0g", 3, "'0g' is not a hex byte"),
            ("> +1", 1, "'+1' is not a hex byte"),
            ("<", 1, "'<' line without bytes"),
            ("<~ 01 05 0000", 1, "a '<~' line holds the 8 header bytes after the length, got 4"),
            ("! closed", 1, "unknown action '! closed'; expected '! close' or '! shutdown'"),
            ("# fine\n= 00", 2, "cannot read '= 00'; lines start with >, <, <~, ! or #"),
        ]
    )
    func malformedLinesAreReportedWithTheirNumber(text: String, line: Int, message: String) {
        do throws(ProtocolVectorError) {
            _ = try ProtocolVector.parse(name: "bad", text: text)
            Issue.record("'\(text)' parsed")
        } catch {
            #expect(error.file == "bad.vector")
            #expect(error.line == line)
            #expect(error.message == message)
            #expect(error.description == "bad.vector:\(line): \(message)")
        }
    }

    @Test func theVectorsAreFoundFromTheSourceTree() throws {
        #expect(ProtocolVector.directory.hasSuffix("/Protocol/vectors"))
        let vectors = try ProtocolVector.load(directory: ProtocolVector.directory)
        let files = vectors.map { $0.name + ".vector" }
        #expect(files == files.sorted())
        #expect(vectors.allSatisfy { !$0.steps.isEmpty })
        #expect(throws: ProtocolVectorError.self) { try ProtocolVector.load(directory: "/nonexistent/vectors") }
    }

    @Test func hexRendersShortAndLongInputs() {
        #expect(ProtocolVector.hex([0x00, 0x0f, 0xa0]) == "000fa0")
        let long = ProtocolVector.hex([UInt8](repeating: 0xab, count: 200))
        #expect(long == String(repeating: "ab", count: 48) + "...(200 bytes)..." + String(repeating: "ab", count: 16))
    }

    // MARK: - Matching replies

    static let statsBody = Array(
        ("{\"version\":\"0.1.0\",\"uptime_seconds\":3,\"items\":0,\"memory_bytes\":0,\"memory_limit\":1024,"
            + "\"gets\":0,\"hits\":0,\"misses\":0,\"puts\":0,\"deletes\":0,\"evictions\":0,\"expired\":0,"
            + "\"connections_current\":1,\"connections_total\":1,\"disk_limit\":0}").utf8
    )

    static func frame(_ header: [UInt8], _ body: [UInt8]) -> [UInt8] {
        let length = UInt32(8 + body.count)
        return [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)]
            + header + body
    }

    @Test func aHeaderMatchChecksLengthHeaderAndStatsBody() {
        let header: [UInt8] = [1, 5, 0, 0, 0, 0, 0, 3]
        let expected = ProtocolVector.ExpectedReply(match: .header(header), closesAfter: false)
        #expect(expected.problem(with: Self.frame(header, Self.statsBody)) == nil)
        #expect(expected.problem(with: Self.frame([1, 5, 0, 0, 0, 0, 0, 4], Self.statsBody)) != nil)
        #expect(expected.problem(with: Self.frame(header, Self.statsBody) + [0]) != nil)
        #expect(expected.problem(with: Self.frame(header, Array("[1]".utf8))) != nil)
        #expect(expected.problem(with: [0, 0, 0, 8, 1, 5]) != nil)
        // A header match on something other than an OK STATS reply does not look at the body.
        let other = ProtocolVector.ExpectedReply(match: .header([1, 6, 0, 0, 0, 0, 0, 1]), closesAfter: false)
        #expect(other.problem(with: Self.frame([1, 6, 0, 0, 0, 0, 0, 1], [0xff])) == nil)
    }

    @Test func anExactMatchComparesEveryByte() {
        let bytes: [UInt8] = [0, 0, 0, 8, 1, 6, 0, 0, 0, 0, 0, 1]
        let expected = ProtocolVector.ExpectedReply(match: .exact(bytes), closesAfter: false)
        #expect(expected.problem(with: bytes) == nil)
        #expect(
            expected.problem(with: bytes.dropLast() + [2])
                == "expected 000000080106000000000001, got 000000080106000000000002"
        )
    }

    @Test func statsBodiesNeedEveryRequiredField() {
        #expect(ProtocolVector.statsProblem(in: Self.statsBody) == nil)
        #expect(
            ProtocolVector.statsProblem(in: Self.statsBody, diskTier: true)?.hasPrefix("STATS body lacks disk_items")
                == true
        )
        #expect(
            ProtocolVector.statsProblem(in: Array("{\"items\":1}".utf8))?.hasPrefix("STATS body lacks memory_bytes")
                == true
        )
        #expect(ProtocolVector.statsProblem(in: Array("not json".utf8)) != nil)
        var wrongType = String(decoding: Self.statsBody, as: UTF8.self)
        wrongType = wrongType.replacingOccurrences(of: "\"items\":0", with: "\"items\":\"0\"")
        #expect(ProtocolVector.statsProblem(in: Array(wrongType.utf8)) == "STATS field items is not a number")
        let numericVersion = String(decoding: Self.statsBody, as: UTF8.self)
            .replacingOccurrences(of: "\"version\":\"0.1.0\"", with: "\"version\":1")
        #expect(ProtocolVector.statsProblem(in: Array(numericVersion.utf8)) == "STATS field version is not a string")
    }

    @Test func replayReportsTheFirstDifferingReply() throws {
        let vector = try ProtocolVector.parse(
            name: "wrong",
            text: """
                > 00000008 01 06 0000 00000001
                < 00000008 01 06 0000 00000001
                > 00000008 01 06 0000 00000002
                < 00000008 01 06 0000 00000009
                """
        )
        do {
            try vector.replay(on: CodecModelNode())
            Issue.record("the replay matched a wrong id")
        } catch let mismatch as ProtocolVectorMismatch {
            #expect(mismatch.vector == "wrong" && mismatch.reply == 1)
            #expect(
                mismatch.description
                    == "wrong.vector, reply 1: expected 000000080106000000000009, got 000000080106000000000002"
            )
        }
    }

    @Test func replayReportsAMissingClose() throws {
        let vector = try ProtocolVector.parse(
            name: "open",
            text: "> 00000008 01 06 0000 00000001\n< 00000008 01 06 0000 00000001\n! close\n"
        )
        #expect(throws: ProtocolVectorMismatch.self) { try vector.replay(on: CodecModelNode()) }
    }
}
