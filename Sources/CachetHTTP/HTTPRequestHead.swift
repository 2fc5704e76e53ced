#if canImport(Glibc)
import Glibc
#endif

/// The head of an HTTP/1.x request (RFC 9112): its request line and the header fields the node reads,
/// decoded in place from the bytes received, no I/O. What the node's HTTP port needs and no more: the
/// method, the target's path and query as sent (still percent-encoded), whether the connection stays open,
/// and the fields of values served read-only (`Range`, `If-Range`, `If-None-Match`, `Authorization`).
public struct HTTPRequestHead: Sendable, Equatable {
    /// The method, as sent (`GET`, `HEAD`, ...).
    public var method: String
    /// The target's path, still percent-encoded (origin form; an absolute-form target loses its scheme and
    /// authority).
    public var path: String
    /// The target's query, after `?`, still percent-encoded; empty without one.
    public var query: String
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    public var minorVersion: Int
    /// `Range`, if sent.
    public var range: String?
    /// `If-Range`, if sent.
    public var ifRange: String?
    /// `If-None-Match`, if sent.
    public var ifNoneMatch: String?
    /// `Authorization`, if sent.
    public var authorization: String?
    /// Whether the connection stays open after the response: HTTP/1.1 unless `Connection: close`, HTTP/1.0
    /// only with `Connection: keep-alive`.
    public var keepAlive: Bool
    /// Whether a body follows the head (`Content-Length` above 0, or any `Transfer-Encoding`). The node reads
    /// no request bodies: it answers such a request and closes the connection.
    public var hasBody: Bool

    /// The longest head read (request line and fields); a longer one is refused with 431.
    public static let maximumLength = 16 << 10

    /// What decoding the front of a buffer found.
    public enum Decoding: Sendable, Equatable {
        /// The head is not whole yet.
        case needMore
        /// A whole head, `length` bytes with its blank line.
        case head(HTTPRequestHead, length: Int)
        /// A head that cannot be served: answered with `status` and the connection closed (the rest of the
        /// stream cannot be framed).
        case failure(HTTPHeadError)
    }

    /// Decodes the head at the front of `bytes` (a bare LF ends a line as CRLF does, as RFC 9112 allows).
    /// - Parameter bytes: what was received and not read yet.
    /// - Returns: what it found; never reads past the head's blank line.
    public static func decode(_ bytes: UnsafeRawBufferPointer) -> Decoding {
        // Empty lines before the request line are ignored (RFC 9112, 2.2).
        var start = 0
        while start < bytes.count, bytes[start] == cr || bytes[start] == lf { start += 1 }
        guard let end = headEnd(bytes, from: start) else {
            if bytes.count - start > maximumLength { return .failure(HTTPHeadError(.headTooLarge)) }
            return .needMore
        }
        guard end - start <= maximumLength else { return .failure(HTTPHeadError(.headTooLarge)) }
        var lines = LineReader(bytes: bytes, position: start, end: end)
        guard let requestLine = lines.next() else { return .failure(HTTPHeadError(.badRequestLine)) }
        guard var head = parseRequestLine(requestLine) else { return .failure(HTTPHeadError(.badRequestLine)) }
        var connectionClose = false
        var connectionKeepAlive = false
        while let line = lines.next() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
                !line[..<colon].contains(where: { $0 == space || $0 == tab })
            else {
                return .failure(HTTPHeadError(.badHeaderField))
            }
            let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
            let value = trimmed(line[(colon + 1)...])
            switch name {
            case "range": head.range = value
            case "if-range": head.ifRange = value
            case "if-none-match": head.ifNoneMatch = value
            case "authorization": head.authorization = value
            case "content-length":
                guard let length = UInt64(value), value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                    return .failure(HTTPHeadError(.badContentLength))
                }
                if length > 0 { head.hasBody = true }
            case "transfer-encoding":
                head.hasBody = true
            case "connection":
                for token in value.lowercased().split(separator: ",") {
                    let option = token.trimmingSpacesAndTabs()
                    if option == "close" { connectionClose = true }
                    if option == "keep-alive" { connectionKeepAlive = true }
                }
            default:
                break
            }
        }
        head.keepAlive = !connectionClose && (head.minorVersion >= 1 || connectionKeepAlive)
        return .head(head, length: end)
    }

    private static let cr = UInt8(ascii: "\r")
    private static let lf = UInt8(ascii: "\n")
    private static let space = UInt8(ascii: " ")
    private static let tab = UInt8(ascii: "\t")

    /// The offset just past the blank line that ends the head, or nil while there is none. Line ends are
    /// found with `memchr`: a head received a byte at a time is searched again at each byte, so the search
    /// must cost little per byte.
    private static func headEnd(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard let base = bytes.baseAddress else { return nil }
        var index = start
        let limit = min(bytes.count, start + maximumLength + 4)
        while index < limit {
            guard let found = memchr(base + index, Int32(lf), limit - index) else { return nil }
            let at = UnsafeRawPointer(found) - base
            if at + 1 < bytes.count, bytes[at + 1] == lf { return at + 2 }
            if at + 2 < bytes.count, bytes[at + 1] == cr, bytes[at + 2] == lf { return at + 3 }
            index = at + 1
        }
        return nil
    }

    /// `METHOD SP target SP HTTP/1.x`.
    private static func parseRequestLine(_ line: ArraySlice<UInt8>) -> HTTPRequestHead? {
        let parts = line.split(separator: space, omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty,
            parts[0].allSatisfy({ $0 > 0x20 && $0 < 0x7f }), parts[1].allSatisfy({ $0 > 0x20 && $0 < 0x7f })
        else { return nil }
        let version = Array(parts[2])
        guard version.count == 8, version.starts(with: Array("HTTP/1.".utf8)),
            (0x30...0x39).contains(version[7])
        else { return nil }
        var target = String(decoding: parts[1], as: UTF8.self)
        if !target.hasPrefix("/") {
            // Absolute form (`http://host/path`): the path after the authority.
            let bytes = Array(target.utf8)
            guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), bytes[colon...].starts(with: Array("://".utf8))
            else { return nil }
            let rest = bytes[(colon + 3)...]
            target = rest.firstIndex(of: UInt8(ascii: "/")).map { String(decoding: rest[$0...], as: UTF8.self) } ?? "/"
        }
        let question = target.firstIndex(of: "?")
        return HTTPRequestHead(
            method: String(decoding: parts[0], as: UTF8.self),
            path: String(target[..<(question ?? target.endIndex)]),
            query: question.map { String(target[target.index(after: $0)...]) } ?? "",
            minorVersion: Int(version[7] - 0x30),
            keepAlive: true,
            hasBody: false
        )
    }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> String {
        String(decoding: bytes, as: UTF8.self).trimmingSpacesAndTabs()
    }

    /// Whether `If-None-Match` names `etag`, weakly or not, or is `*` (RFC 9110, 13.1.2); false without one.
    /// - Parameter etag: the entity tag, quoted.
    public func ifNoneMatchNames(_ etag: String) -> Bool {
        guard let ifNoneMatch else { return false }
        return ifNoneMatch.split(separator: ",").contains { tag in
            let text = tag.trimmingSpacesAndTabs()
            return text == "*" || text == etag || text == "W/" + etag
        }
    }

    /// The value of query parameter `name`, percent-decoded (`+` for a space), or nil without one.
    /// - Parameter name: the parameter's name, as sent.
    public func queryParameter(_ name: String) -> String? {
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.first.map(String.init) == name else { continue }
            let raw = parts.count == 2 ? String(parts[1]).replacingPlus() : ""
            return HTTPValueRequest.percentDecoded(Substring(raw)).map { String(decoding: $0, as: UTF8.self) }
        }
        return nil
    }

    /// The lines of a head, each without its line end.
    private struct LineReader {
        let bytes: UnsafeRawBufferPointer
        var position: Int
        let end: Int

        mutating func next() -> ArraySlice<UInt8>? {
            guard position < end else { return nil }
            var stop = position
            while stop < end, bytes[stop] != HTTPRequestHead.lf { stop += 1 }
            var line = Array(bytes[position..<stop])[...]
            position = stop + 1
            if line.last == HTTPRequestHead.cr { line = line.dropLast() }
            return line.isEmpty ? nil : line
        }
    }
}

/// Why a request head cannot be served, with the status it is answered with.
public struct HTTPHeadError: Error, Sendable, Equatable {
    /// What was wrong.
    public struct Code: Hashable, Sendable {
        fileprivate enum Value: Hashable, Sendable {
            case headTooLarge, badRequestLine, badHeaderField, badContentLength
        }
        fileprivate let value: Value

        /// The head is longer than ``HTTPRequestHead/maximumLength`` (431).
        public static let headTooLarge = Code(value: .headTooLarge)
        /// The request line is not `METHOD SP target SP HTTP/1.x` (400).
        public static let badRequestLine = Code(value: .badRequestLine)
        /// A header field has no colon, or white space before it (400).
        public static let badHeaderField = Code(value: .badHeaderField)
        /// `Content-Length` is not a number (400).
        public static let badContentLength = Code(value: .badContentLength)
    }

    /// What was wrong.
    public let code: Code

    init(_ code: Code) { self.code = code }

    /// The status code it is answered with.
    public var status: Int { code == .headTooLarge ? 431 : 400 }

    /// A line for the response's body.
    public var message: String {
        switch code.value {
        case .headTooLarge:
            return "the request head is longer than \(HTTPRequestHead.maximumLength) bytes"
        case .badRequestLine:
            return "the request line is not METHOD SP target SP HTTP/1.x"
        case .badHeaderField:
            return "a header field has no colon, or white space before its colon"
        case .badContentLength:
            return "Content-Length is not a number"
        }
    }
}

extension StringProtocol {
    /// Without its leading and trailing spaces and tabs (HTTP's optional whitespace), taken off as bytes: a
    /// space followed by a combining mark is one `Character`, but still whitespace to HTTP.
    func trimmingSpacesAndTabs() -> String {
        let bytes = Array(utf8)
        var start = 0
        var end = bytes.count
        while start < end && (bytes[start] == 0x20 || bytes[start] == 0x09) { start += 1 }
        while end > start && (bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09) { end -= 1 }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    fileprivate func replacingPlus() -> String {
        String(map { $0 == "+" ? " " : $0 })
    }
}
