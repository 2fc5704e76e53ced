// A libFuzzer target for the HTTP codec of the node's HTTP port (CachetHTTP). Built and run by
// `Fuzz/run-http.sh`, never by the root package's `swift build` or `swift test`.
//
// Every input is decoded as a stream of pipelined request heads, and for each one the harness checks:
// 1. No read outside the input (AddressSanitizer; the input lies in an allocation of exactly its size).
// 2. Bounds: a head ends inside the input, with a blank line (`\n\n`, `\r\n\r\n` or `\n\r\n`), and no
//    blank line ends earlier (after the empty lines a request may start with); it is at most
//    `HTTPRequestHead.maximumLength` long.
// 3. Splitting: every prefix that stops before the head's end decodes as "need more" (or, past the longest
//    head, as a head too large), never as a head or another failure; the head's own bytes, and the input
//    with more bytes after it, decode to the same head. A failure stays the same failure whatever follows.
// 4. What a head holds agrees with an independent reading of its bytes (RFC 9112): the method and target
//    of the request line, the minor version, the last `Range`, `If-Range`, `If-None-Match` and
//    `Authorization` fields trimmed, whether a body follows, and keep-alive.
// 5. What is read from a head: a value request's key percent-decodes back from its own encoding, its byte
//    range is ordered and its bounds lie inside the value for several lengths; credentials, query
//    parameters and entity tags are read without a crash.
// A violated property stops the process with a message (`fatalError`), which libFuzzer records as a crash.

import CachetHTTP

#if canImport(Glibc)
import Glibc
#endif

private func check(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

private let cr = UInt8(ascii: "\r")
private let lf = UInt8(ascii: "\n")

private func decode(_ bytes: ArraySlice<UInt8>) -> HTTPRequestHead.Decoding {
    Array(bytes).withUnsafeBytes { HTTPRequestHead.decode($0) }
}

/// Where the first blank line after `start` ends, read byte by byte.
private func blankLineEnd(_ bytes: [UInt8], from start: Int) -> Int? {
    var index = start
    while index < bytes.count {
        if bytes[index] == lf {
            if index + 1 < bytes.count, bytes[index + 1] == lf { return index + 2 }
            if index + 2 < bytes.count, bytes[index + 1] == cr, bytes[index + 2] == lf { return index + 3 }
        }
        index += 1
    }
    return nil
}

/// The fields of a head, read independently: lines split at LF, a CR before it dropped.
private func lines(_ bytes: ArraySlice<UInt8>) -> [ArraySlice<UInt8>] {
    var result: [ArraySlice<UInt8>] = []
    var line = bytes.startIndex
    for index in bytes.indices where bytes[index] == lf {
        var end = index
        if end > line, bytes[end - 1] == cr { end -= 1 }
        if end > line { result.append(bytes[line..<end]) }
        line = index + 1
    }
    return result
}

private func text(_ bytes: ArraySlice<UInt8>) -> String {
    var slice = bytes
    while let first = slice.first, first == 0x20 || first == 0x09 { slice = slice.dropFirst() }
    while let last = slice.last, last == 0x20 || last == 0x09 { slice = slice.dropLast() }
    return String(decoding: slice, as: UTF8.self)
}

private func checkHead(_ head: HTTPRequestHead, _ bytes: ArraySlice<UInt8>) {
    var all = lines(bytes)
    check(!all.isEmpty, "a head without a request line")
    let requestLine = all.removeFirst()
    let parts = requestLine.split(separator: 0x20, omittingEmptySubsequences: false)
    check(parts.count == 3, "request line of \(parts.count) parts")
    check(head.method == String(decoding: parts[0], as: UTF8.self), "method \(head.method)")
    check(!head.method.isEmpty && head.method.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7f }, "method's bytes")
    let target = String(decoding: parts[1], as: UTF8.self)
    if target.hasPrefix("/") {
        check(
            head.query.isEmpty
                ? target == head.path || target == head.path + "?" : target == head.path + "?" + head.query,
            "target \(target) read as \(head.path) ? \(head.query)"
        )
    } else {
        check(head.path.hasPrefix("/"), "absolute-form path \(head.path)")
    }
    check(!head.path.contains("?"), "path with a query: \(head.path)")
    check(Array(parts[2].prefix(7)) == Array("HTTP/1.".utf8) && parts[2].count == 8, "version")
    check(head.minorVersion == Int(parts[2].last! - 0x30), "minor version \(head.minorVersion)")
    var range: String?
    var ifRange: String?
    var ifNoneMatch: String?
    var authorization: String?
    var hasBody = false
    var close = false
    var keepAlive = false
    for line in all {
        let colon = line.firstIndex(of: UInt8(ascii: ":"))!
        check(colon > line.startIndex, "a field without a name")
        let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
        let value = text(line[(colon + 1)...])
        switch name {
        case "range": range = value
        case "if-range": ifRange = value
        case "if-none-match": ifNoneMatch = value
        case "authorization": authorization = value
        case "content-length":
            check(!value.isEmpty && value.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }, "content-length \(value)")
            if value.utf8.contains(where: { $0 != 0x30 }) { hasBody = true }
        case "transfer-encoding": hasBody = true
        case "connection":
            for option in value.lowercased().split(separator: ",").map({ text(Array($0.utf8)[...]) }) {
                if option == "close" { close = true }
                if option == "keep-alive" { keepAlive = true }
            }
        default: break
        }
    }
    check(head.range == range, "range \(String(describing: head.range)) against \(String(describing: range))")
    check(head.ifRange == ifRange, "if-range")
    check(head.ifNoneMatch == ifNoneMatch, "if-none-match")
    check(
        head.authorization == authorization,
        "authorization \(String(reflecting: head.authorization)) against \(String(reflecting: authorization))"
    )
    check(head.hasBody == hasBody, "has body \(head.hasBody)")
    check(head.keepAlive == (!close && (head.minorVersion >= 1 || keepAlive)), "keep-alive \(head.keepAlive)")
    checkReadings(head)
}

private func percentEncoded(_ key: [UInt8]) -> String {
    let hex = Array("0123456789ABCDEF".utf8)
    var out: [UInt8] = []
    for byte in key {
        if (0x30...0x39).contains(byte) || (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte) {
            out.append(byte)
        } else {
            out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 15)]]
        }
    }
    return String(decoding: out, as: UTF8.self)
}

private func checkReadings(_ head: HTTPRequestHead) {
    if let request = HTTPValueRequest(path: head.path, rangeHeader: head.range) {
        check((1...4096).contains(request.key.count), "key of \(request.key.count) bytes")
        let again = HTTPValueRequest(path: HTTPValueRequest.pathPrefix + percentEncoded(request.key), rangeHeader: nil)
        check(again?.key == request.key, "a key does not decode back from its own encoding")
        _ = request.contentType
        if let range = request.range {
            if case .from(let first, let last?) = range { check(last >= first, "range \(first)-\(last)") }
            for total: UInt64 in [0, 1, 2, 1000, 1 << 20, UInt64.max] {
                if let bounds = range.bounds(total: total) {
                    check(!bounds.isEmpty && bounds.upperBound <= total, "bounds \(bounds) of \(total)")
                }
            }
            let asked = range.valueRange
            if case .from(let first, _) = range { check(asked.offset == first, "offset \(asked.offset)") }
        }
    }
    _ = HTTPCredentials.find(authorization: head.authorization, token: head.queryParameter("access_token"))
    _ = head.ifNoneMatchNames("\"0123456789abcdef\"")
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    var position = 0
    var heads = 0
    while position < input.count, heads < 64 {
        let rest = input[position...]
        // Straight from libFuzzer's buffer, whose size is the input's: a read past it is caught.
        let decoded = HTTPRequestHead.decode(UnsafeRawBufferPointer(start: data + position, count: size - position))
        var start = position
        while start < input.count, input[start] == cr || input[start] == lf { start += 1 }
        let end = blankLineEnd(input, from: start)
        switch decoded {
        case .needMore:
            check(end == nil, "need more, with a blank line at \(end!)")
            check(input.count - start <= HTTPRequestHead.maximumLength, "need more past the longest head")
            return 0
        case .head(let head, let length):
            check(
                length == end.map { $0 - position },
                "head of \(length) bytes, blank line at \(String(describing: end))"
            )
            check(length - (start - position) <= HTTPRequestHead.maximumLength, "a head of \(length) bytes")
            check(decode(rest.prefix(length)) == decoded, "its own bytes decode otherwise")
            check(decode(rest + Array("GET / HTTP/1.1\r\n\r\n".utf8)) == decoded, "more bytes change the head")
            for cut in stride(from: 0, to: length, by: max(1, length / 16)) + [length - 1] where cut < length {
                switch decode(rest.prefix(cut)) {
                case .needMore: break
                case .failure(let error) where error.code == .headTooLarge: break
                case let other: fatalError("a prefix of \(cut) bytes of a \(length)-byte head: \(other)")
                }
            }
            checkHead(head, rest[start..<(position + length)])
            position += length
            heads += 1
        case .failure(let error):
            check(decode(rest + Array("\r\n\r\nmore".utf8)) == decoded, "a failure changes with more bytes")
            check((400...431).contains(error.status) && !error.message.isEmpty, "failure \(error)")
            return 0
        }
    }
    return 0
}
