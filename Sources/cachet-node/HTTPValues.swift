import CachetClient
import CachetIO
import CachetNode
import CachetWire
import FlyingFox
import FlyingSocks
import Foundation

/// Values served read-only over the node's HTTP port (`--http-values`, `docs/node.md`, "Values over HTTP"):
/// `GET` and `HEAD /values/KEY`, with one `Range` (206 and `Content-Range`, 416 past the end), 404 on a
/// miss, `Accept-Ranges: bytes`, and a `Content-Type` from the key's extension, so that a video player reads
/// straight from the cache.
///
/// Each response is read as GETs of ranges of 1 MiB on the node's own binary port as it is sent, one read
/// ahead of the socket (so a value of any size is served in bounded memory), through a ``CachetClient`` that talks to this node
/// alone: the node routes and forwards them like any GET (a key another member owns is read there), checks
/// the user's role and key prefixes (HTTP Basic credentials or a bearer token become the client's AUTH). Every range carries
/// the value's tag, sent as the `ETag` (`If-None-Match` answers 304, `If-Range` with another tag sends the
/// whole value): a value replaced while a response is sent ends the response early (the connection
/// closes short of its `Content-Length`), never a mixture of two values. One client per set of credentials,
/// at most ``maximumClients``; the oldest goes when a new one is needed.
actor HTTPValues {
    /// Clients kept at once (one per user seen).
    static let maximumClients = 32

    private let node: CachetClient.Node
    private let tls: CachetTLSConfiguration?
    private var clients: [(credentials: CachetClient.Credentials?, client: CachetClient)] = []
    /// Responses sent, by status code (`/metrics`: `cachet_http_value_responses_total`).
    private var responses: [Int: Int] = [:]

    /// - Parameters:
    ///   - host: the address the node's binary port listens on (`--host`); a wildcard address is reached
    ///     through the loopback address of its family.
    ///   - port: the node's binary port (or its TLS-only port, with `tls`).
    ///   - tls: how to reach a TLS-only node; nil for plain TCP.
    ///   - maximumFrame: the node's `--max-frame`: a range is read in parts that fit its replies.
    init(
        host: String,
        port: Int,
        tls: CachetTLSConfiguration?,
        maximumFrame: Int = CachetProtocol.defaultMaximumPayloadLength
    ) {
        let reachable = host == "0.0.0.0" ? "127.0.0.1" : host == "::" ? "::1" : host
        node = CachetClient.Node(host: reachable, port: port)
        self.tls = tls
        // What one range reply carries: the frame less its header, the value's length and its tag.
        let fits = maximumFrame - CachetProtocol.headerSize - CachetValueRange.replyPrefixSize
        firstPart = min(1 << 20, fits)
        nextParts = min(1 << 20, fits)
    }

    /// Bytes asked for by an answer's first read (its head: what a player's small ranges take whole).
    let firstPart: Int
    /// Bytes asked for by each read after it, one read ahead of what is sent (4 MiB streamed no faster than
    /// 1 MiB, measured with Benchmarks/large-values.sh, and held four times the memory).
    let nextParts: Int

    /// Adds the routes to `server`.
    static func addRoutes(to server: HTTPServer, values: HTTPValues) async {
        for method in ["GET", "HEAD"] {
            await server.appendRoute(HTTPRoute("\(method) \(HTTPValueRequest.pathPrefix)*")) { request in
                var response = await values.respond(to: request, head: method == "HEAD")
                // A HEAD answer carries no body, errors included (the client would read it as the next answer).
                if method == "HEAD" && response.headers[.contentLength] == nil {
                    response = HTTPResponse(statusCode: response.statusCode, headers: response.headers, body: Data())
                }
                await values.count(response.statusCode.code)
                return response
            }
        }
    }

    private func count(_ code: Int) { responses[code, default: 0] += 1 }

    /// The responses sent so far by status code, in Prometheus's text format (appended to `/metrics`).
    var metricsText: String {
        var text = "# HELP cachet_http_value_responses_total Responses to GET and HEAD /values/KEY, by status code.\n"
        text += "# TYPE cachet_http_value_responses_total counter\n"
        for (code, count) in responses.sorted(by: { $0.key < $1.key }) {
            text += "cachet_http_value_responses_total{code=\"\(code)\"} \(count)\n"
        }
        return text
    }

    /// Shuts every client down.
    func shutdown() async {
        for (_, client) in clients { await client.shutdown() }
        clients = []
    }

    private func client(for credentials: CachetClient.Credentials?) throws(CachetClientError) -> CachetClient {
        if let index = clients.firstIndex(where: { $0.credentials == credentials }) {
            let kept = clients.remove(at: index)
            clients.append(kept)
            return kept.client
        }
        var configuration = CachetClient.Configuration(nodes: [node])
        configuration.credentials = credentials
        configuration.tls = tls
        configuration.failover = false
        configuration.requestTimeout = .seconds(5)
        let client = try CachetClient(configuration: configuration)
        if clients.count >= Self.maximumClients {
            // Requests may still be using it: shut it down once they have had their deadline.
            let oldest = clients.removeFirst().client
            Task {
                try? await Task.sleep(for: .seconds(10))
                await oldest.shutdown()
            }
        }
        clients.append((credentials, client))
        return client
    }

    func respond(to request: HTTPRequest, head: Bool) async -> HTTPResponse {
        // The target's path as sent, still percent-encoded: `request.path` is decoded and standardized (dot
        // segments and a trailing slash gone), which would change keys.
        let path = request.target.path(percentEncoded: true)
        guard let asked = HTTPValueRequest(path: path, rangeHeader: request.headers[HTTPHeader("Range")])
        else {
            return Self.text(
                .badRequest,
                "the path names no key: /values/ then a key of 1 to 4096 bytes, percent-encoded"
            )
        }
        let credentials: CachetClient.Credentials?
        switch Self.credentials(authorization: request.headers[.authorization], token: request.query["access_token"]) {
        case .none: credentials = nil
        case .some(.some(let given)): credentials = given
        case .some(.none):
            return Self.text(
                .badRequest,
                "the credentials are neither HTTP Basic (user:secret in base64) nor a bearer token USER:SECRET "
                    + "(in Authorization: Bearer, or the access_token query parameter)"
            )
        }
        do throws(CachetClientError) {
            let client = try client(for: credentials)
            // The first read: the start of the range (or, for HEAD and a suffix, no bytes), which tells the
            // value's length and tag; the rest is read as the response is sent, a part at a time.
            let first: CachetValueRange
            switch asked.range {
            case .some(let byteRange) where !head && !byteRange.isSuffix:
                // `valueRange` keeps a last byte at the largest offset there is from overflowing.
                let asked = byteRange.valueRange
                first = CachetValueRange(offset: asked.offset, length: min(asked.length, UInt64(firstPart)))
            case .none where !head:
                first = CachetValueRange(offset: 0, length: UInt64(firstPart))
            default:
                first = CachetValueRange(offset: 0, length: 0)
            }
            let slice: CachetValueSlice
            do throws(CachetClientError) {
                guard let read = try await client.get(asked.key, range: first) else {
                    return Self.text(.notFound, "no value under this key")
                }
                slice = read
            } catch  where error.code == .rangeNotSatisfiable {
                // Learn the length for Content-Range (an empty range at 0 is always served).
                guard let length = try await client.get(asked.key, range: CachetValueRange(offset: 0, length: 0))
                else { return Self.text(.notFound, "no value under this key") }
                return Self.unsatisfiable(total: length.totalLength, type: asked.contentType)
            }
            let total = UInt64(slice.totalLength)
            let etag = "\"" + String(slice.tag, radix: 16) + "\""
            var headers: HTTPHeaders = [
                .contentType: asked.contentType,
                HTTPHeader("Accept-Ranges"): "bytes",
                HTTPHeader("Cache-Control"): "no-cache",
                HTTPHeader("ETag"): etag,
            ]
            if let match = request.headers[HTTPHeader("If-None-Match")], Self.matches(match, etag) {
                return HTTPResponse(statusCode: .notModified, headers: headers, body: Data())
            }
            // A Range with an If-Range naming another version of the value: the whole value instead.
            var byteRange = asked.range
            if let condition = request.headers[HTTPHeader("If-Range")], condition != etag { byteRange = nil }
            let bounds: Range<UInt64>
            if let byteRange {
                guard let found = byteRange.bounds(total: total) else {
                    return Self.unsatisfiable(total: slice.totalLength, type: asked.contentType)
                }
                bounds = found
                headers[HTTPHeader("Content-Range")] = "bytes \(bounds.lowerBound)-\(bounds.upperBound - 1)/\(total)"
            } else {
                bounds = 0..<total
            }
            headers[.contentLength] = String(bounds.count)
            let status: HTTPStatusCode = byteRange == nil ? .ok : .partialContent
            guard !head else { return HTTPResponse(statusCode: status, headers: headers, body: Data()) }
            // The bytes already read, if they start where the response does.
            let already = UInt64(slice.offset) == bounds.lowerBound ? slice.bytes.prefix(Int(bounds.count)) : []
            if already.count == Int(bounds.count) {
                // Written whole: the server otherwise writes a body 4 KiB at a time, each write a turn of its
                // loop (1 MiB ranges took 7.4 ms at p50 so, against 1.7 through the binary port).
                let body = HTTPBodySequence(data: Data(already), suggestedBufferSize: already.count)
                return HTTPResponse(statusCode: status, headers: headers, body: body)
            }
            let body = HTTPValueBody(
                client: client,
                key: asked.key,
                tag: slice.tag,
                first: Array(already),
                offset: bounds.lowerBound + UInt64(already.count),
                end: bounds.upperBound,
                partSize: nextParts
            )
            return HTTPResponse(
                statusCode: status,
                headers: headers,
                body: HTTPBodySequence(from: body, count: Int(bounds.count), suggestedBufferSize: nextParts)
            )
        } catch {
            return Self.failure(error)
        }
    }

    /// Whether an `If-None-Match` header names `etag` (or is `*`).
    static func matches(_ header: String, _ etag: String) -> Bool {
        header.split(separator: ",").contains { tag in
            let trimmed = tag.trimmingCharacters(in: .whitespaces)
            return trimmed == "*" || trimmed == etag || trimmed == "W/" + etag
        }
    }

    /// The credentials a request carries: HTTP Basic, or a bearer token `USER:SECRET` in the Authorization
    /// header (RFC 6750's header) or, for a player that cannot set headers (a `<video src>`), in the
    /// `access_token` query parameter; the header wins. `.none` without any, `.some(nil)` for malformed ones.
    static func credentials(authorization header: String?, token: String?) -> CachetClient.Credentials?? {
        guard let header else {
            guard let token else { return .none }
            return .some(userAndSecret(token))
        }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return .some(nil) }
        switch parts[0].lowercased() {
        case "basic":
            guard let data = Data(base64Encoded: String(parts[1])), let text = String(data: data, encoding: .utf8)
            else {
                return .some(nil)
            }
            return .some(userAndSecret(text))
        case "bearer":
            return .some(userAndSecret(String(parts[1])))
        default:
            return .some(nil)
        }
    }

    /// `user:secret` split at its first colon; nil without one or with an empty user.
    private static func userAndSecret(_ text: String) -> CachetClient.Credentials? {
        guard let colon = text.firstIndex(of: ":"), colon != text.startIndex else { return nil }
        return CachetClient.Credentials(user: String(text[..<colon]), secret: String(text[text.index(after: colon)...]))
    }

    static func unsatisfiable(total: Int, type: String) -> HTTPResponse {
        HTTPResponse(
            statusCode: .rangeNotSatisfiable,
            headers: [
                HTTPHeader("Content-Range"): "bytes */\(total)", .contentType: type,
                HTTPHeader("Accept-Ranges"): "bytes",
            ],
            body: Data()
        )
    }

    static func failure(_ error: CachetClientError) -> HTTPResponse {
        switch error.code {
        case .notAuthenticated:
            var response = text(.unauthorized, error.message)
            response.headers[HTTPHeader("WWW-Authenticate")] = #"Basic realm="cachet", Bearer realm="cachet""#
            return response
        case .forbidden: return text(.forbidden, error.message)
        case .badRequest: return text(.badRequest, error.message)
        case .unavailable, .timeout, .connectionFailed, .shutdown: return text(.serviceUnavailable, error.message)
        default: return text(.internalServerError, error.message)
        }
    }

    static func text(_ status: HTTPStatusCode, _ message: String) -> HTTPResponse {
        HTTPResponse(
            statusCode: status,
            headers: [.contentType: "text/plain; charset=utf-8"],
            body: Data((message + "\n").utf8)
        )
    }
}

/// The rest of a response's bytes, read a range at a time as the HTTP server asks for them; a range whose
/// tag is not the response's (the value was replaced) ends the body with an error.
struct HTTPValueBody: AsyncBufferedSequence, Sendable {
    typealias Element = UInt8

    let client: CachetClient
    let key: [UInt8]
    let tag: UInt64
    let first: [UInt8]
    let offset: UInt64
    let end: UInt64
    let partSize: Int

    func makeAsyncIterator() -> Iterator {
        Iterator(body: self, buffer: first[...], offset: offset)
    }

    struct Iterator: AsyncBufferedIteratorProtocol {
        let body: HTTPValueBody
        var buffer: ArraySlice<UInt8>
        /// The value offset of the next range to ask for.
        var offset: UInt64
        /// The next range, asked for while the bytes before it are sent (one read ahead, so that the node's
        /// read and the socket's write overlap).
        var ahead: Task<[UInt8], any Error>?

        mutating func next() async throws -> UInt8? {
            try await nextBuffer(suggested: 1)?.first
        }

        /// Asks for the range at `offset`, if any is left; `offset` moves once its bytes are taken (a reply
        /// may carry fewer than asked for: the node cuts a range at the room its memory budget has).
        mutating func readAhead() {
            guard offset < body.end else {
                ahead = nil
                return
            }
            let length = Swift.min(UInt64(body.partSize), body.end - offset)
            let range = CachetValueRange(offset: offset, length: length)
            let (client, key, tag) = (body.client, body.key, body.tag)
            ahead = Task {
                guard let slice = try await client.get(key, range: range), slice.tag == tag, !slice.bytes.isEmpty,
                    slice.bytes.count <= Int(length)
                else {
                    throw CachetClientError(code: .valueChanged, message: "the value changed while it was sent")
                }
                return slice.bytes
            }
        }

        mutating func nextBuffer(suggested count: Int) async throws -> ArraySlice<UInt8>? {
            if ahead == nil && offset < body.end { readAhead() }
            if buffer.isEmpty {
                guard let task = ahead else { return nil }
                let bytes = try await task.value
                offset += UInt64(bytes.count)
                buffer = bytes[...]
                readAhead()
            }
            let taken = buffer.prefix(Swift.max(1, count))
            buffer = buffer.dropFirst(taken.count)
            return taken
        }
    }
}
