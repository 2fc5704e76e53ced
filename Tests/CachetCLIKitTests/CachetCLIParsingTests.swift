import CachetWire
import Foundation
import Testing

@testable import CachetCLIKit

@Suite("cachet-cli: words, commands and rendering")
struct CachetCLIParsingTests {
    @Test func tokenizerHandlesQuotesAndEscapes() throws {
        #expect(
            try CachetCLITokenizer.tokenize("put k1 hello") == [
                Array("put".utf8), Array("k1".utf8), Array("hello".utf8),
            ]
        )
        #expect(try CachetCLITokenizer.tokenize("  get   \"my key\"  ") == [Array("get".utf8), Array("my key".utf8)])
        #expect(
            try CachetCLITokenizer.tokenize(#"put "a\"b" "x\\y\n\x00\xff""#)
                == [Array("put".utf8), Array("a\"b".utf8), Array("x\\y\n".utf8) + [0, 255]]
        )
        #expect(try CachetCLITokenizer.tokenize(#"put k "" "#) == [Array("put".utf8), Array("k".utf8), []])
        #expect(try CachetCLITokenizer.tokenize("") == [])
    }

    @Test(arguments: [#"put "open"#, #"get "bad \q""#, #"get "\x4""#, #"get "ends\"#])
    func tokenizerRejects(_ line: String) {
        #expect(throws: CachetCLIError.self) { try CachetCLITokenizer.tokenize(line) }
    }

    @Test func parsesEveryCommand() throws {
        #expect(
            try CachetCLICommand.parse("put k v")
                == .put(key: Array("k".utf8), value: .literal(Array("v".utf8)), ttl: 0)
        )
        #expect(
            try CachetCLICommand.parse("put k v --ttl 30")
                == .put(key: Array("k".utf8), value: .literal(Array("v".utf8)), ttl: 30)
        )
        #expect(
            try CachetCLICommand.parse("PUT --ttl 5 k @/tmp/x")
                == .put(key: Array("k".utf8), value: .file("/tmp/x"), ttl: 5)
        )
        #expect(try CachetCLICommand.parse("get k --out /tmp/o") == .get(key: Array("k".utf8), output: "/tmp/o"))
        #expect(try CachetCLICommand.parse("get k") == .get(key: Array("k".utf8), output: nil))
        #expect(
            try CachetCLICommand.parse("get k --range 10-19 --out /o")
                == .get(key: Array("k".utf8), output: "/o", range: CachetValueRange(offset: 10, length: 10))
        )
        #expect(
            try CachetCLICommand.parse("get k --range 5-")
                == .get(key: Array("k".utf8), output: nil, range: CachetValueRange(offset: 5))
        )
        for bad in ["get k --range 9-3", "get k --range -3", "get k --range a-b", "get k --range 1-2-3"] {
            #expect(throws: CachetCLIError.self, "\(bad)") { try CachetCLICommand.parse(bad) }
        }
        #expect(try CachetCLICommand.parse("del k") == .delete(key: Array("k".utf8)))
        #expect(try CachetCLICommand.parse("clear") == .clear(prefixes: []))
        #expect(try CachetCLICommand.parse("clear app: b") == .clear(prefixes: [Array("app:".utf8), Array("b".utf8)]))
        #expect(try CachetCLICommand.parse("stats") == .stats)
        #expect(try CachetCLICommand.parse("ping") == .ping)
        #expect(try CachetCLICommand.parse("help") == .help)
        #expect(try CachetCLICommand.parse("quit") == .quit)
        #expect(try CachetCLICommand.parse("   ") == nil)
    }

    @Test(arguments: [
        "frobnicate", "put onlykey", "put k v --ttl -1", "put k v --ttl", "get", "get a b", "del", "ping now",
    ])
    func rejectsWithAHint(_ line: String) {
        do {
            _ = try CachetCLICommand.parse(line)
            Issue.record("'\(line)' parsed")
        } catch {
            #expect(error.code == .usage)
            #expect(!error.message.isEmpty)
        }
    }

    @Test func rendersTextAndBinary() {
        #expect(CachetCLIFormatter.render(Array("hello world".utf8)) == "hello world")
        #expect(CachetCLIFormatter.render([0x00, 0xff]) == "0x00ff")
        #expect(CachetCLIFormatter.render(Array("tab\there".utf8)) == "tab\there")
        #expect(CachetCLIFormatter.render([0xc3, 0x28]) == "0xc328")  // invalid UTF-8
        #expect(CachetCLIFormatter.render(Array("é".utf8)) == "é")
    }

    @Test func statsTableIsSortedAndAligned() {
        let lines = CachetCLIFormatter.statsTable(Array(#"{"items":3,"version":"0.1.0","hits":10}"#.utf8))
        #expect(lines == ["hits     10", "items    3", "version  0.1.0"])
    }

    @Test func traceAnnotatesRequestsAndReplies() {
        let put = CachetCommand.put(key: Array("k1".utf8), value: Array("hello".utf8), ttl: 0).encoded(id: 1)
        #expect(
            CachetCLIFormatter.trace(put, outgoing: true) == [
                #">> 25 bytes  len=21 v=1 op=PUT(0x01) flags=0x0000 id=1 | ttl=0 key_len=2 key="k1" value="hello""#,
                "   00000015 01 01 0000 00000001 00000000 0002 6b31 68656c6c6f",
            ]
        )
        let reply = CachetResponse(opcode: .get, status: .notFound, id: 7).encoded
        #expect(
            CachetCLIFormatter.trace(reply, outgoing: false) == [
                "<< 12 bytes  len=8 v=1 op=GET(0x02) status=NOT_FOUND(1) id=7",
                "   00000008 01 02 0001 00000007",
            ]
        )
        let error = CachetResponse(opcode: .none, status: .tooLarge, id: 0, body: Array("too big".utf8)).encoded
        #expect(
            CachetCLIFormatter.trace(error, outgoing: false)[0]
                == #"<< 19 bytes  len=15 v=1 op=NONE(0x00) status=TOO_LARGE(3) id=0 | message="too big""#
        )
    }
}

@Suite("cachet-cli: the progress bar")
struct CachetCLIProgressTests {
    @Test func theBarShowsTheShareTheBytesAndTheRate() {
        #expect(
            CachetCLIProgress.render(done: 512 << 20, total: 1 << 30, seconds: 2)
                == "[###############...............]  50%  512.0 MiB / 1.0 GiB  256.0 MiB/s"
        )
        #expect(
            CachetCLIProgress.render(done: 0, total: 0, seconds: 0).hasPrefix("[" + String(repeating: "#", count: 30))
        )
        #expect(CachetCLIProgress.bytes(1023) == "1023 B" && CachetCLIProgress.bytes(1536) == "1.5 KiB")
    }

    @Test func aBarIsDrawnInPlaceAndEndedWithANewline() {
        let text = LockedText()
        let progress = CachetCLIProgress { text.append($0) }
        progress.update(done: 10, total: 10)
        progress.finish()
        progress.finish()
        #expect(
            text.value.hasPrefix("\r[") && text.value.hasSuffix("\n") && text.value.filter { $0 == "\n" }.count == 1
        )
    }
}

final class LockedText: @unchecked Sendable {
    private let lock = NSLock()
    private var text = ""
    func append(_ more: String) { lock.withLock { text += more } }
    var value: String { lock.withLock { text } }
}
