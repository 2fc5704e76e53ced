import CachetWire
import Testing

@testable import CachetHTTP

/// An HTTP request for a value read without sockets (`HTTPValueRequest`): the key from the path, one byte
/// range from `Range`, and what a range serves of a value of a given length.
@Suite("HTTP value requests")
struct HTTPValueRequestTests {
    @Test func keysComeFromThePercentEncodedPath() {
        #expect(HTTPValueRequest(path: "/values/a%20b/c%2Fd", rangeHeader: nil)?.key == Array("a b/c/d".utf8))
        #expect(HTTPValueRequest(path: "/values/%e2%82%ac", rangeHeader: nil)?.key == [0xe2, 0x82, 0xac])
        for bad in [
            "/values/", "/values/%", "/values/%2", "/values/%zz", "/other/k",
            "/values/" + String(repeating: "k", count: 4097),
        ] {
            #expect(HTTPValueRequest(path: bad, rangeHeader: nil) == nil, "\(bad)")
        }
    }

    @Test func oneByteRangeIsReadAndAnythingElseIgnored() {
        func range(_ header: String) -> HTTPValueRequest.ByteRange? {
            HTTPValueRequest(path: "/values/k", rangeHeader: header)?.range
        }
        #expect(range("bytes=0-99") == .from(0, through: 99))
        #expect(range(" bytes=5- ") == .from(5, through: nil))
        #expect(range("bytes=-20") == .suffix(20))
        #expect(range("BYTES=1-1") == .from(1, through: 1))
        for ignored in [
            "bytes=9-3", "bytes=0-1,4-5", "items=0-1", "bytes=a-b", "bytes=-", "bytes=1", "bytes=+5-", "bytes=-+3",
        ] {
            #expect(range(ignored) == nil, "\(ignored)")
        }
    }

    @Test func whatARangeServesOfAValue() {
        #expect(HTTPValueRequest.ByteRange.from(0, through: 99).bounds(total: 50) == 0..<50)
        #expect(HTTPValueRequest.ByteRange.from(49, through: nil).bounds(total: 50) == 49..<50)
        #expect(HTTPValueRequest.ByteRange.from(50, through: nil).bounds(total: 50) == nil, "at the end: 416")
        #expect(HTTPValueRequest.ByteRange.suffix(10).bounds(total: 50) == 40..<50)
        #expect(HTTPValueRequest.ByteRange.suffix(90).bounds(total: 50) == 0..<50)
        #expect(HTTPValueRequest.ByteRange.suffix(0).bounds(total: 50) == nil)
        #expect(HTTPValueRequest.ByteRange.suffix(5).bounds(total: 0) == nil)
        #expect(HTTPValueRequest.ByteRange.from(3, through: 7).valueRange == CachetValueRange(offset: 3, length: 5))
        #expect(HTTPValueRequest.ByteRange.suffix(5).valueRange == CachetValueRange(offset: 0))
        // The largest last byte there is: to the end, without overflowing.
        let huge = HTTPValueRequest.ByteRange.from(5, through: .max)
        #expect(huge.valueRange == CachetValueRange(offset: 5) && huge.bounds(total: 50) == 5..<50)
        #expect(HTTPValueRequest(path: "/values/k", rangeHeader: "bytes=5-18446744073709551615")?.range == huge)
    }

    @Test func theContentTypeComesFromTheExtension() {
        #expect(HTTPValueRequest(path: "/values/films/a.WEBM", rangeHeader: nil)?.contentType == "video/webm")
        #expect(HTTPValueRequest(path: "/values/a.mp4", rangeHeader: nil)?.contentType == "video/mp4")
        #expect(
            HTTPValueRequest(path: "/values/page.html", rangeHeader: nil)?.contentType == "text/html; charset=utf-8"
        )
        #expect(HTTPValueRequest(path: "/values/blob", rangeHeader: nil)?.contentType == "application/octet-stream")
    }
}
