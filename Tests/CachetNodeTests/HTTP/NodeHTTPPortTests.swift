import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// The HTTP port as a raw socket sees it (`docs/node.md`, "The HTTP port"), on real node processes:
/// pipelined requests answered in order on one connection, every malformed request answered with its status
/// (and the connection closed only where it cannot go on), a value replaced while it is sent cut short
/// rather than mixed, and clients that send half a request or drip it one byte at a time holding up nobody.
@Suite("Node: the HTTP port", .dedicatedThreads)
struct NodeHTTPPortTests {
    struct Response {
        var status: Int
        var fields: [String: String]
        var body: [UInt8]
    }

    /// Reads one response: its head, then `Content-Length` bytes (none after a HEAD).
    static func readResponse(_ socket: TestSocket, head: Bool = false) throws -> Response {
        let text = String(decoding: try socket.readThrough(Array("\r\n\r\n".utf8)), as: UTF8.self)
        var lines = text.components(separatedBy: "\r\n")
        let status = Int(lines.removeFirst().split(separator: " ")[1]) ?? 0
        var fields: [String: String] = [:]
        for line in lines where !line.isEmpty {
            let parts = line.split(separator: ":", maxSplits: 1)
            fields[parts[0].lowercased()] = parts[1].trimmingCharacters(in: .whitespaces)
        }
        let length = head ? 0 : Int(fields["content-length"] ?? "0") ?? 0
        return Response(status: status, fields: fields, body: try socket.readBytes(length))
    }

    static func node(_ extra: [String] = []) throws -> (NodeProcess, Int) {
        try NodeHTTPValuesTests.node(extra)
    }

    @Test func pipelinedRequestsAreAnsweredInOrderOnOneConnection() throws {
        let (node, port) = try Self.node()
        let large = PatternBytes.make(count: 3 << 20, seed: 3)
        let binary = try node.connect()
        #expect(try binary.roundTrip(.put(key: Array("large".utf8), value: large, ttl: 0)).status == .ok)
        #expect(try binary.roundTrip(.put(key: Array("small".utf8), value: Array("tiny".utf8), ttl: 0)).status == .ok)
        let socket = try TestSocket(port: port)
        try socket.send(
            Array(
                ("GET /values/large HTTP/1.1\r\nHost: a\r\n\r\nGET /values/small HTTP/1.1\r\n\r\n"
                    + "GET /health/live HTTP/1.1\r\n\r\nHEAD /values/small HTTP/1.1\r\n\r\n"
                    + "GET /values/large HTTP/1.1\r\nRange: bytes=-3\r\n\r\n").utf8
            )
        )
        let first = try Self.readResponse(socket)
        #expect(first.status == 200 && first.body == large, "the large value whole, a piece at a time")
        let second = try Self.readResponse(socket)
        #expect(second.status == 200 && second.body == Array("tiny".utf8))
        let third = try Self.readResponse(socket)
        #expect(third.status == 200 && third.body == Array("live\n".utf8))
        let fourth = try Self.readResponse(socket, head: true)
        #expect(fourth.status == 200 && fourth.fields["content-length"] == "4" && fourth.fields["etag"] != nil)
        let fifth = try Self.readResponse(socket)
        #expect(fifth.status == 206 && fifth.body == Array(large.suffix(3)))
        #expect(fifth.fields["date"]?.hasSuffix(" GMT") == true)
        // More requests in one write than the session decodes ahead (32), none of them a value (which would
        // stop the decoding by itself): all answered, in order.
        let many = (0..<100).map { "GET /health/\($0 % 2 == 0 ? "live" : "nowhere") HTTP/1.1\r\n\r\n" }.joined()
        try socket.send(Array(many.utf8))
        for index in 0..<100 {
            let response = try Self.readResponse(socket)
            #expect(response.status == (index % 2 == 0 ? 200 : 404), "response \(index)")
        }
    }

    /// What each bad request gets, and whether the connection goes on (it does unless the stream cannot
    /// be framed any more, or the client asked to close).
    @Test(arguments: [
        ("garbage\r\n\r\n", 400, true),
        ("GET / HTTP/1.1\r\nBad header\r\n\r\n", 400, true),
        ("POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 405, true),
        ("DELETE /values/k HTTP/1.1\r\n\r\n", 405, false),
        ("GET /values/k HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 400, true),
        ("GET /nowhere HTTP/1.1\r\n\r\n", 404, false),
        ("GET /values/%zz HTTP/1.1\r\n\r\n", 400, false),
        ("GET /values/k HTTP/1.1\r\nAuthorization: Digest x\r\n\r\n", 404, false),
        ("GET /health/live HTTP/1.0\r\n\r\n", 200, true),
        ("GET /health/live HTTP/1.1\r\nConnection: close\r\n\r\n", 200, true),
        ("GET / HTTP/1.1\r\nX-Fill: {17,000 bytes}\r\n\r\n", 431, true),
    ])
    func badRequestsGetTheirStatus(request: String, status: Int, closes: Bool) throws {
        let (node, port) = try Self.node()
        defer { withExtendedLifetime(node) {} }
        let socket = try TestSocket(port: port)
        try socket.send(
            Array(request.replacingOccurrences(of: "{17,000 bytes}", with: String(repeating: "a", count: 17_000)).utf8)
        )
        let response = try Self.readResponse(socket)
        #expect(response.status == status, "\(String(decoding: response.body, as: UTF8.self))")
        if status == 405 { #expect(response.fields["allow"] == "GET, HEAD") }
        if closes {
            #expect(response.fields["connection"] == "close")
            socket.setTimeout(5)
            #expect(socket.waitForClose(), "closed after the answer")
        } else {
            try socket.send(Array("GET /health/live HTTP/1.1\r\n\r\n".utf8))
            #expect(try Self.readResponse(socket).status == 200, "the connection goes on")
        }
    }

    /// Ranges of a value on the disk tier go from the buffer they were read into to the socket, behind their
    /// heads: pipelined with other requests, to a reader that takes a little at a time, every response whole
    /// and in order (some sent straight, some queued behind the ones before); the binary port's ranges too.
    @Test func rangesReadFromDiskReachTheSocketWholeAndInOrder() throws {
        let directory = TemporaryDirectory(prefix: "cachet-http-direct")
        defer { directory.remove() }
        // Past --large-value and the memory tier: every range is read from its blocks on disk.
        let (node, port) = try Self.node([
            "--data-dir", directory.path, "--disk-limit", "128MiB", "--memory-limit", "4MiB",
        ])
        let value = PatternBytes.make(count: 9_000_001, step: 37, seed: 5)
        let key = Array("films/direct.webm".utf8)
        let binary = try node.connect()
        #expect(try NodeUploadTests.upload(value, key: key, size: 1_500_000, on: binary).allSatisfy { $0 == .ok })
        let socket = try TestSocket(port: port)
        socket.setReceiveBuffer(64 << 10)
        let ranges = [(0, 1_048_575), (1_000_000, 2_048_575), (8_999_000, 9_000_000), (262_144, 524_287), (5, 5)]
        var requests = ""
        for (index, (first, last)) in ranges.enumerated() {
            requests += "GET /values/films/direct.webm HTTP/1.1\r\nRange: bytes=\(first)-\(last)\r\n\r\n"
            if index == 1 { requests += "GET /health/live HTTP/1.1\r\n\r\n" }
        }
        requests += "GET /values/films/direct.webm HTTP/1.1\r\n\r\n"
        try socket.send(Array(requests.utf8))
        Thread.sleep(forTimeInterval: 0.3)
        for (index, (first, last)) in ranges.enumerated() {
            let response = try Self.readResponse(socket)
            #expect(response.status == 206, "range \(index)")
            #expect(response.fields["content-range"] == "bytes \(first)-\(last)/\(value.count)")
            #expect((response.body == Array(value[first...last])) == true, "range \(index)")
            if index == 1 {
                let live = try Self.readResponse(socket)
                #expect(live.status == 200 && live.body == Array("live\n".utf8))
            }
        }
        let whole = try Self.readResponse(socket)
        #expect(whole.status == 200 && (whole.body == value) == true, "the whole value, \(whole.body.count) bytes")

        // The binary port: pipelined ranges and PINGs, read slowly.
        let slow = try node.connect()
        slow.setReceiveBuffer(64 << 10)
        var pipelined: [UInt8] = []
        for (index, (first, last)) in ranges.enumerated() {
            let range = CachetValueRange(offset: UInt64(first), length: UInt64(last - first + 1))
            pipelined += CachetCommand.rangedGet(key: key, range: range).encoded(id: UInt32(2 * index + 1))
            pipelined += CachetCommand.ping.encoded(id: UInt32(2 * index + 2))
        }
        try slow.send(pipelined)
        Thread.sleep(forTimeInterval: 0.3)
        for (index, (first, last)) in ranges.enumerated() {
            let reply = try slow.readResponse()
            #expect(reply.id == UInt32(2 * index + 1) && reply.status == .ok)
            let read = try #require(CachetValueRange.decodeReply(reply.body))
            #expect(read.0 == UInt64(value.count), "range \(index): the value's length")
            #expect((Array(reply.body[read.2...]) == Array(value[first...last])) == true, "range \(index)")
            #expect(try slow.readResponse().id == UInt32(2 * index + 2))
        }
    }

    @Test func aValueReplacedWhileItIsSentEndsTheResponseShortNeverMixed() throws {
        // Values of 24 MiB held in memory: a node without a disk tier holds them once --large-value allows.
        let (node, port) = try Self.node(["--large-value", "32MiB"])
        let old = PatternBytes.make(count: 24 << 20, seed: 1)
        let binary = try node.connect()
        #expect(try binary.roundTrip(.put(key: Array("clip".utf8), value: old, ttl: 0)).status == .ok)
        let socket = try TestSocket(port: port)
        socket.setReceiveBuffer(64 << 10)
        try socket.send(Array("GET /values/clip HTTP/1.1\r\n\r\n".utf8))
        let head = String(decoding: try socket.readThrough(Array("\r\n\r\n".utf8)), as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 200") && head.contains("Content-Length: \(old.count)"))
        let start = try socket.readBytes(100 << 10)
        // The reader is slow: the node has sent a few MiB at most when the value is replaced.
        let new = PatternBytes.make(count: 24 << 20, seed: 2)
        #expect(try binary.roundTrip(.put(key: Array("clip".utf8), value: new, ttl: 0)).status == .ok)
        socket.setTimeout(10)
        let body = start + (try socket.readToClose())
        #expect(body.count < old.count, "cut short of its Content-Length: \(body.count)")
        #expect(body.count > 0 && body == Array(old.prefix(body.count)), "every byte sent is the old value's")
        let metrics = try NodeHTTPValuesTests.request(port, "/metrics")
        #expect(String(decoding: metrics.body, as: UTF8.self).contains("cachet_http_responses_cut_short_total 1"))
        // A new request reads the new value whole.
        let after = try NodeHTTPValuesTests.request(port, "/values/clip", headers: ["Range": "bytes=0-99"])
        #expect(after.body == Array(new.prefix(100)))
    }

    @Test func halfRequestsAndDrippersHoldUpNobody() throws {
        let (node, port) = try Self.node()
        let binary = try node.connect()
        #expect(try binary.roundTrip(.put(key: Array("k".utf8), value: Array("value".utf8), ttl: 0)).status == .ok)
        // 300 connections that send half a head and never the rest.
        var halves: [TestSocket] = []
        for _ in 0..<300 {
            let socket = try TestSocket(port: port)
            try socket.send(Array("GET /values/k HTTP/1.1\r\nHost: a\r\nX-Half: ".utf8))
            halves.append(socket)
        }
        // One that drips a whole request a byte at a time.
        let dripper = try TestSocket(port: port)
        let request = Array("GET /values/k HTTP/1.1\r\nHost: a\r\n\r\n".utf8)
        for byte in request.dropLast() {
            try dripper.send([byte])
            Thread.sleep(forTimeInterval: 0.002)
        }
        // Meanwhile a well-behaved client is answered at once.
        let started = Date()
        for _ in 0..<20 {
            let reply = try NodeHTTPValuesTests.request(port, "/values/k")
            #expect(reply.status == 200 && reply.body == Array("value".utf8))
        }
        #expect(Date().timeIntervalSince(started) < 10)
        try dripper.send([request.last!])
        let dripped = try Self.readResponse(dripper)
        #expect(dripped.status == 200 && dripped.body == Array("value".utf8))
        // The half heads hold their few bytes each, within the connection budget.
        let stats = try node.stats()
        let held = stats["connection_memory_bytes"] as? Int ?? .max
        #expect(held < 300 * 80 * 1024, "\(held) bytes held by connections")
        // One whose head never ends is refused once it passes the limit, and closed.
        let endless = try TestSocket(port: port)
        try endless.send(Array("GET / HTTP/1.1\r\nX-Fill: ".utf8) + Array(repeating: UInt8(ascii: "a"), count: 20_000))
        #expect(try Self.readResponse(endless).status == 431)
        #expect(endless.waitForClose())
        for socket in halves { socket.close() }
    }
}
