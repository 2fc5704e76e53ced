import CachetClient
import CachetIO
import CachetNode
import CachetWire
import FlyingFox
import Foundation

/// Values served read-only over the node's HTTP port (`--http-values`, `docs/node.md`, "Values over HTTP"):
/// `GET` and `HEAD /values/KEY`, with one `Range` (206 and `Content-Range`, 416 past the end), 404 on a
/// miss, `Accept-Ranges: bytes`, and a `Content-Type` from the key's extension, so that a video player reads
/// straight from the cache.
///
/// Each request is one GET of a range on the node's own binary port, through a ``CachetClient`` that
/// talks to this node alone: the node routes and forwards it like any GET (a key another member owns is
/// read there), checks the user's role and key prefixes (HTTP Basic credentials become the client's AUTH),
/// and answers one consistent reading of the value, never a mixture of two writes. One client per set of
/// credentials, at most ``maximumClients``; the oldest goes when a new one is needed.
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
    init(host: String, port: Int, tls: CachetTLSConfiguration?) {
        let reachable = host == "0.0.0.0" ? "127.0.0.1" : host == "::" ? "::1" : host
        node = CachetClient.Node(host: reachable, port: port)
        self.tls = tls
    }

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
        switch Self.basicCredentials(request.headers[.authorization]) {
        case .none: credentials = nil
        case .some(.some(let given)): credentials = given
        case .some(.none): return Self.text(.badRequest, "the Authorization header is not HTTP Basic user:secret")
        }
        do throws(CachetClientError) {
            let client = try client(for: credentials)
            // HEAD of the whole value asks for no bytes: the reply still carries the length.
            let range =
                head && asked.range == nil
                ? CachetValueRange(offset: 0, length: 0)
                : asked.range?.valueRange
                    ?? CachetValueRange(offset: 0)
            let slice: CachetValueSlice
            do throws(CachetClientError) {
                guard let read = try await client.get(asked.key, range: range) else {
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
            var headers: HTTPHeaders = [
                .contentType: asked.contentType,
                HTTPHeader("Accept-Ranges"): "bytes",
                HTTPHeader("Cache-Control"): "no-cache",
            ]
            guard let byteRange = asked.range else {
                headers[.contentLength] = String(total)
                return HTTPResponse(statusCode: .ok, headers: headers, body: head ? Data() : Data(slice.bytes))
            }
            guard let bounds = byteRange.bounds(total: total) else {
                return Self.unsatisfiable(total: slice.totalLength, type: asked.contentType)
            }
            // A suffix was read whole; the bytes of the others start at their first offset.
            let start = Int(bounds.lowerBound) - slice.offset
            let bytes = slice.bytes[start..<(start + bounds.count)]
            headers[HTTPHeader("Content-Range")] = "bytes \(bounds.lowerBound)-\(bounds.upperBound - 1)/\(total)"
            headers[.contentLength] = String(bounds.count)
            return HTTPResponse(statusCode: .partialContent, headers: headers, body: head ? Data() : Data(bytes))
        } catch {
            return Self.failure(error)
        }
    }

    /// The credentials of an `Authorization: Basic …` header: nil without the header, `.some(nil)` for one
    /// that is not Basic `user:secret`.
    static func basicCredentials(_ header: String?) -> CachetClient.Credentials?? {
        guard let header else { return .none }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "basic", let data = Data(base64Encoded: String(parts[1])),
            let text = String(data: data, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return .some(nil) }
        return .some(
            CachetClient.Credentials(user: String(text[..<colon]), secret: String(text[text.index(after: colon)...]))
        )
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
            response.headers[HTTPHeader("WWW-Authenticate")] = #"Basic realm="cachet""#
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
