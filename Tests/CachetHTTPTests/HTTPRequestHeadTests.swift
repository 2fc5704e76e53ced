import Testing

@testable import CachetHTTP

/// Request heads decoded without sockets (`HTTPRequestHead`): whole and at every split, the fields the node
/// reads, keep-alive by version and `Connection`, and every malformed head answered with its status.
@Suite("HTTP request heads")
struct HTTPRequestHeadTests {
    static func decode(_ text: String) -> HTTPRequestHead.Decoding {
        Array(text.utf8).withUnsafeBytes { HTTPRequestHead.decode($0) }
    }

    static let browser =
        "GET /values/films/a%20b.webm?access_token=u%3As HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
        + "Range: bytes=0-\r\nIf-Range: \"ab\"\r\nAccept: */*\r\nAuthorization: Bearer u:s\r\n\r\n"

    @Test func aBrowsersRequestIsReadWholeAndNeverBeforeItsBlankLine() throws {
        guard case .head(let head, let length) = Self.decode(Self.browser + "GET / HTTP/1.1\r\n") else {
            Issue.record("not decoded")
            return
        }
        #expect(length == Self.browser.utf8.count, "stops at its blank line")
        #expect(head.method == "GET" && head.path == "/values/films/a%20b.webm" && head.minorVersion == 1)
        #expect(head.range == "bytes=0-" && head.ifRange == "\"ab\"" && head.authorization == "Bearer u:s")
        #expect(head.keepAlive && !head.hasBody && head.ifNoneMatch == nil)
        #expect(head.queryParameter("access_token") == "u:s" && head.queryParameter("other") == nil)
        // Every split short of the blank line needs more.
        let bytes = Array(Self.browser.utf8)
        for cut in 0..<bytes.count {
            let decoding = Array(bytes[..<cut]).withUnsafeBytes { HTTPRequestHead.decode($0) }
            #expect(decoding == .needMore, "cut at \(cut)")
        }
    }

    @Test func bareLineFeedsLeadingBlankLinesAndAbsoluteTargets() {
        guard
            case .head(let head, _) = Self.decode(
                "\r\n\nHEAD http://node:80/metrics?x=1 HTTP/1.0\nRange: bytes=1-2\n\n"
            )
        else {
            Issue.record("not decoded")
            return
        }
        #expect(head.method == "HEAD" && head.path == "/metrics" && head.query == "x=1")
        #expect(head.minorVersion == 0 && !head.keepAlive, "HTTP/1.0 closes unless asked to keep alive")
        #expect(head.range == "bytes=1-2")
    }

    @Test(arguments: [
        ("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false),
        ("GET / HTTP/1.1\r\nConnection: Keep-Alive, Upgrade\r\n\r\n", true),
        ("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", true),
        ("GET / HTTP/1.0\r\n\r\n", false),
        ("GET / HTTP/1.1\r\n\r\n", true),
    ])
    func keepAliveFollowsTheVersionAndConnection(text: String, keepAlive: Bool) {
        guard case .head(let head, _) = Self.decode(text) else {
            Issue.record("not decoded")
            return
        }
        #expect(head.keepAlive == keepAlive)
    }

    /// Optional whitespace is bytes: a space before a combining mark is trimmed, though with the mark it
    /// makes one `Character` (found by the fuzz target: the value kept its leading space).
    @Test func whitespaceAroundAFieldIsTrimmedAsBytes() {
        guard case .head(let head, _) = Self.decode("GET /x HTTP/1.1\r\nAuthorization: \u{0594}eep x \t\r\n\r\n") else {
            Issue.record("not decoded")
            return
        }
        #expect(head.authorization == "\u{0594}eep x")
        #expect(Array(head.authorization!.utf8).first == 0xD6)
    }

    @Test func aBodyIsNoticed() {
        for text in [
            "POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\n", "GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            guard case .head(let head, _) = Self.decode(text) else {
                Issue.record("not decoded: \(text)")
                continue
            }
            #expect(head.hasBody)
        }
        guard case .head(let empty, _) = Self.decode("GET /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n") else { return }
        #expect(!empty.hasBody)
    }

    @Test(arguments: [
        ("GET /\r\n\r\n", HTTPHeadError.Code.badRequestLine),
        ("GET  / HTTP/1.1\r\n\r\n", .badRequestLine),
        ("GET / HTTP/2.0\r\n\r\n", .badRequestLine),
        ("GET / HTTP/1.1 extra\r\n\r\n", .badRequestLine),
        ("GET relative HTTP/1.1\r\n\r\n", .badRequestLine),
        ("GET / HTTP/1.1\r\nNo colon here\r\n\r\n", .badHeaderField),
        ("GET / HTTP/1.1\r\nHost : x\r\n\r\n", .badHeaderField),
        ("GET / HTTP/1.1\r\n: empty name\r\n\r\n", .badHeaderField),
        ("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", .badContentLength),
        ("GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", .badContentLength),
    ])
    func malformedHeadsAreRefusedWithTheirStatus(text: String, code: HTTPHeadError.Code) {
        #expect(Self.decode(text) == .failure(HTTPHeadError(code)))
        #expect(HTTPHeadError(code).status == 400)
    }

    @Test func aHeadPastTheLimitIsRefusedBeforeItEnds() {
        let long = "GET / HTTP/1.1\r\nX-Fill: " + String(repeating: "a", count: HTTPRequestHead.maximumLength)
        #expect(Self.decode(long) == .failure(HTTPHeadError(.headTooLarge)), "no blank line yet, already too long")
        #expect(Self.decode(long + "\r\n\r\n") == .failure(HTTPHeadError(.headTooLarge)))
        #expect(HTTPHeadError(.headTooLarge).status == 431)
        let fits = "GET / HTTP/1.1\r\nX-Fill: " + String(repeating: "a", count: 1000) + "\r\n\r\n"
        if case .head = Self.decode(fits) {} else { Issue.record("a head under the limit is read") }
    }

    @Test func responseHeadsDatesAndCredentials() {
        let head = HTTPResponseHead(status: 206, fields: [("Content-Range", "bytes 0-9/100")])
        #expect(
            String(decoding: head.encoded(contentLength: 10, date: "D", keepAlive: false), as: UTF8.self)
                == "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nContent-Length: 10\r\nDate: D\r\n"
                + "Connection: close\r\n\r\n"
        )
        #expect(head["content-range"] == "bytes 0-9/100")
        #expect(HTTPDate.format(784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT", "RFC 9110's example")
        #expect(HTTPDate.format(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(1_709_164_800) == "Thu, 29 Feb 2024 00:00:00 GMT", "a leap day")
        let user = HTTPCredentials(user: Array("shop".utf8), secret: Array("s:cret".utf8))
        #expect(HTTPCredentials.find(authorization: "Basic c2hvcDpzOmNyZXQ=", token: nil) == .given(user))
        #expect(HTTPCredentials.find(authorization: "Bearer shop:s:cret", token: "x:y") == .given(user), "header wins")
        #expect(HTTPCredentials.find(authorization: nil, token: "shop:s:cret") == .given(user))
        #expect(HTTPCredentials.find(authorization: nil, token: nil) == .none)
        for bad in ["Basic !!!", "Basic bm9jb2xvbg==", "Digest x", "Bearer", "Bearer :secret"] {
            #expect(HTTPCredentials.find(authorization: bad, token: nil) == .malformed, "\(bad)")
        }
    }
}
