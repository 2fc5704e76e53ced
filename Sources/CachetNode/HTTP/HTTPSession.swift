import CachetHTTP
import CachetIO
import CachetStore
import CachetWire

/// A connection on the HTTP port (`--http-port`, or `--https-port` over TLS; `docs/node.md`, "The HTTP
/// port"): HTTP/1.1 served on the node's own event loops. `/metrics`, `/health/live` and `/health/ready`
/// are answered from the node's figures; `GET` and `HEAD /values/KEY` (with `--http-values`) become the
/// node's own GETs of ranges, served by the connection's ``RequestProcessor`` as a binary client's are
/// (routing, forwards, users and key prefixes, the disk tier), so a value another member owns is read there
/// and a user reads only under their prefixes.
///
/// A value is sent a piece (``Settings/pieceSize``) at a time: the first GET tells its length and tag, and
/// the next piece is asked for once the connection has no more than one piece left to send, so a value of
/// any size is served in bounded memory and the disk read of a piece overlaps the send of the one before.
/// Every piece must carry the first's tag: a value replaced while it is sent ends the response early (the
/// connection closes short of its `Content-Length`), never a mixture of two values. Requests pipelined
/// behind a value wait for its last piece.
///
/// Touched only on its connection's loop queue (see ``MemcacheSession`` for `@exclusivity(unchecked)`).
final class HTTPSession: TranslatingSession {
    /// What every session of a node shares.
    struct Settings: Sendable {
        /// Whether `/values/` is served (`--http-values`).
        var servesValues: Bool
        /// Whether values are refused over plain HTTP (a node with `--tls-only`: its values travel only
        /// encrypted, on `--https-port`).
        var valuesNeedTLS: Bool
        /// Whether the node has users: value requests carry credentials.
        var requiresAuth: Bool
        /// The most bytes one GET of a range asks for (1 MiB, or less to fit `--max-frame`).
        var pieceSize: Int
        /// `/metrics`: the node's figures in Prometheus's text format.
        var metrics: @Sendable () -> String
        /// `/health/ready`: whether the node serves its keys, and why not.
        var readiness: @Sendable () -> (ready: Bool, reason: String)
        /// Where responses are counted, by status.
        var responses: HTTPResponseCounts
    }

    /// What the reply to one native request means.
    private enum Pending {
        /// A response the session wrote itself (sent in its turn among the replies; the native request was a
        /// PING).
        case literal([UInt8])
        /// The credentials a value request carried, as an AUTH.
        case signIn(HTTPCredentials)
        /// The first GET of a value response: its head, and its first bytes.
        case valueHead
        /// A later piece of the value response in progress, of at most this many bytes.
        case valuePiece(Int)
    }

    /// A value response in progress.
    private struct ValueResponse {
        let key: [UInt8]
        let asked: HTTPRequestHead
        let range: HTTPValueRequest.ByteRange?
        let contentType: String
        let head: Bool
        /// Once its head is sent: the value's tag, the next offset to send, the end of what is sent.
        var tag: UInt64 = 0
        var next: UInt64 = 0
        var end: UInt64 = 0
        /// Whether a piece is asked for and not answered yet.
        var pieceAsked = false
        /// Whether its head is written (its first GET answered).
        var started = false
    }

    let settings: Settings
    /// Whether the connection is TLS (`--https-port`).
    let secure: Bool

    @exclusivity(unchecked) private var native = CachetByteBuffer(capacity: 1024)
    @exclusivity(unchecked) private var contexts = PendingQueue<Pending>()
    /// Bytes at the front of the connection's output that are HTTP already.
    @exclusivity(unchecked) private var textPending = 0
    @exclusivity(unchecked) private var value: ValueResponse? {
        // A value response that ends may leave whole requests in the input, which no read will announce.
        didSet { if oldValue != nil && value == nil { inputWaits = true } }
    }
    /// Whether the input may hold whole requests no turn has decoded yet (see ``wantsTurn(input:outputBytes:)``).
    @exclusivity(unchecked) private var inputWaits = false
    /// Whether a response that closes the connection is queued: nothing more is read.
    @exclusivity(unchecked) private var closeRequested = false
    /// The credentials the connection signed in with (on a node with users).
    @exclusivity(unchecked) private var signedIn: HTTPCredentials?
    /// Whether the last sign-in failed: the value request behind it is answered 401.
    @exclusivity(unchecked) private var signInFailed = false
    @exclusivity(unchecked) private var nextID: UInt32 = 0
    @exclusivity(unchecked) private var scratch = CachetByteBuffer(capacity: 1024)

    var bufferFootprint: Int { max(0, scratch.capacity - 1024) }

    func trimBuffers(tight: Bool) {
        scratch.trimIfEmpty(initial: 1024, retained: 256 << 10, tight: tight)
    }
    @exclusivity(unchecked) private var date: (second: UInt32, text: String) = (0, "")

    /// Requests decoded ahead of their responses at most (one value response among them, last).
    static let pipelineLimit = 32

    init(settings: Settings, secure: Bool) {
        self.settings = settings
        self.secure = secure
    }

    var quitting: Bool { closeRequested && value == nil }

    func exchangeNative(with buffer: inout CachetByteBuffer) {
        swap(&buffer, &native)
    }

    func outputSent(_ count: Int) {
        textPending -= count
    }

    func wantsTurn(input: borrowing CachetByteBuffer, outputBytes: Int) -> Bool {
        if let value { return mayAskNextPiece(value, outputBytes: outputBytes) }
        // Only once a value response ended with requests behind it: after a read, the turn that follows
        // decodes the input anyway (a head dripped a byte at a time is not searched twice per byte).
        // And only while the pipeline has room: a turn could decode nothing more (the replies before must be
        // sent first, which brings the loop back here).
        guard inputWaits, !closeRequested, input.readableBytes > 0,
            contexts.count < Self.pipelineLimit
        else { return false }
        if case .needMore = HTTPRequestHead.decode(input.readableRegion) {
            inputWaits = false
            return false
        }
        return true
    }

    private func mayAskNextPiece(_ value: ValueResponse, outputBytes: Int) -> Bool {
        value.started && !value.pieceAsked && value.next < value.end && outputBytes <= settings.pieceSize
    }

    // MARK: Requests in

    func beginTurn(
        input: inout CachetByteBuffer,
        output: inout CachetByteBuffer,
        outputLimit: Int,
        now: UInt32,
        host: NodeIOQueue,
        tally: inout RequestTally
    ) {
        let outputBytes = output.readableBytes
        if var value {
            // A value response in progress: its next piece, once the client has taken all but one.
            guard mayAskNextPiece(value, outputBytes: outputBytes) else { return }
            let length = Int(min(UInt64(settings.pieceSize), value.end - value.next))
            appendRangeGet(key: value.key, CachetValueRange(offset: value.next, length: UInt64(length)))
            push(.valuePiece(length))
            value.pieceAsked = true
            self.value = value
            return
        }
        while !closeRequested && value == nil && contexts.count < Self.pipelineLimit
            && input.readableBytes > 0
        {
            switch HTTPRequestHead.decode(input.readableRegion) {
            case .needMore:
                inputWaits = false
                return
            case .failure(let error):
                input.moveReadIndex(forwardBy: input.readableBytes)
                respond(error.status, error.message, keepAlive: false, head: false)
            case .head(let head, let length):
                input.moveReadIndex(forwardBy: length)
                serve(head)
            }
        }
        // Stopped with bytes left (the pipeline's limit, a value response, a close): they may hold whole
        // requests that no read will announce.
        inputWaits = input.readableBytes > 0
    }

    private func serve(_ request: HTTPRequestHead) {
        let isHead = request.method == "HEAD"
        guard request.method == "GET" || isHead else {
            return respond(
                405,
                "the HTTP port answers GET and HEAD only",
                keepAlive: request.keepAlive && !request.hasBody,
                head: false,
                fields: [("Allow", "GET, HEAD")]
            )
        }
        guard !request.hasBody else {
            return respond(400, "a GET or HEAD request carries no body", keepAlive: false, head: isHead)
        }
        switch request.path {
        case "/metrics":
            respond(
                200,
                settings.metrics(),
                keepAlive: request.keepAlive,
                head: isHead,
                type: "text/plain; version=0.0.4; charset=utf-8",
                line: false
            )
        case "/health/live":
            respond(200, "live", keepAlive: request.keepAlive, head: isHead)
        case "/health/ready":
            let (ready, reason) = settings.readiness()
            respond(ready ? 200 : 503, reason, keepAlive: request.keepAlive, head: isHead)
        case let path where path.hasPrefix(HTTPValueRequest.pathPrefix) && settings.servesValues:
            serveValue(request, head: isHead)
        default:
            respond(
                404,
                "no such path: try /values/KEY, /metrics, /health/live or /health/ready",
                keepAlive: request.keepAlive,
                head: isHead
            )
        }
    }

    private func serveValue(_ request: HTTPRequestHead, head: Bool) {
        guard !settings.valuesNeedTLS || secure else {
            return respond(
                403,
                "this node serves values over TLS only (--tls-only): ask its --https-port",
                keepAlive: request.keepAlive,
                head: head
            )
        }
        guard let asked = HTTPValueRequest(path: request.path, rangeHeader: request.range) else {
            return respond(
                400,
                "the path names no key: /values/ then a key of 1 to 4096 bytes, percent-encoded",
                keepAlive: request.keepAlive,
                head: head
            )
        }
        if settings.requiresAuth {
            switch HTTPCredentials.find(
                authorization: request.authorization,
                token: request.queryParameter("access_token")
            ) {
            case .malformed:
                return respond(
                    400,
                    "the credentials are neither HTTP Basic (user:secret in base64) nor a bearer token "
                        + "USER:SECRET (in Authorization: Bearer, or the access_token query parameter)",
                    keepAlive: request.keepAlive,
                    head: head
                )
            case .none where signedIn != nil:
                // A request stands alone: it does not read with the credentials of one before it.
                return respond(
                    401,
                    "this node has users: sign in",
                    keepAlive: request.keepAlive,
                    head: head,
                    fields: Self.challenge
                )
            case .none:
                break
            case .given(let credentials):
                if credentials != signedIn { appendSignIn(credentials) }
            }
        }
        // The first read: the start of the range (or, for HEAD and a suffix, no bytes), which tells the
        // value's length and tag; the rest is read as the response is sent, a piece at a time.
        let first: CachetValueRange
        switch asked.range {
        case .some(let byteRange) where !head && !byteRange.isSuffix:
            let wanted = byteRange.valueRange
            first = CachetValueRange(offset: wanted.offset, length: min(wanted.length, UInt64(settings.pieceSize)))
        case .none where !head:
            first = CachetValueRange(offset: 0, length: UInt64(settings.pieceSize))
        default:
            first = CachetValueRange(offset: 0, length: 0)
        }
        value = ValueResponse(
            key: asked.key,
            asked: request,
            range: asked.range,
            contentType: asked.contentType,
            head: head
        )
        appendRangeGet(key: asked.key, first)
        push(.valueHead)
    }

    private static let challenge = [("WWW-Authenticate", #"Basic realm="cachet", Bearer realm="cachet""#)]

    // MARK: Native requests

    private func push(_ pending: Pending) {
        contexts.append(pending)
    }

    private func takeID() -> UInt32 {
        nextID &+= 1
        return nextID
    }

    private func appendRangeGet(key: [UInt8], _ range: CachetValueRange) {
        native.appendRequestFrame(.get, flags: .range, id: takeID(), bodyLength: 2 + key.count + 16) { native in
            withUnsafeBytes(of: UInt16(key.count).bigEndian) { native.append($0) }
            native.append(key)
            withUnsafeBytes(of: range.offset.bigEndian) { native.append($0) }
            withUnsafeBytes(of: range.length.bigEndian) { native.append($0) }
        }
    }

    private func appendSignIn(_ credentials: HTTPCredentials) {
        let length = 2 + credentials.user.count + credentials.secret.count
        native.appendRequestFrame(.auth, flags: [], id: takeID(), bodyLength: length) { native in
            withUnsafeBytes(of: UInt16(credentials.user.count).bigEndian) { native.append($0) }
            native.append(credentials.user)
            native.append(credentials.secret)
        }
        push(.signIn(credentials))
    }

    /// A response written now, sent in its turn (behind a PING).
    private func respond(
        _ status: Int,
        _ message: String,
        keepAlive: Bool,
        head: Bool,
        type: String = "text/plain; charset=utf-8",
        line: Bool = true,
        fields: [(String, String)] = []
    ) {
        let body = Array((line ? message + "\n" : message).utf8)
        var response = HTTPResponseHead(status: status, fields: [("Content-Type", type)] + fields)
            .encoded(contentLength: UInt64(body.count), date: currentDate(), keepAlive: keepAlive)
        if !head { response += body }
        native.appendRequestFrame(.ping, flags: [], id: takeID(), bodyLength: 0) { _ in }
        push(.literal(response))
        settings.responses.count(status)
        if !keepAlive { closeRequested = true }
    }

    private func currentDate() -> String {
        let now = CachetClock.now()
        if now != date.second { date = (now, HTTPDate.format(Int64(now))) }
        return date.text
    }

    // MARK: Replies out

    /// Turns the native replies appended to `output` since the last call into HTTP.
    func translateReplies(in output: inout CachetByteBuffer) {
        let untranslated = output.readableBytes - textPending
        guard untranslated > 0 else { return }
        scratch.clear()
        scratch.shrinkIfEmpty(above: 2 << 20, to: 1024)
        forEachNativeReply(in: UnsafeRawBufferPointer(rebasing: output.readableRegion[textPending...])) {
            header,
            body in
            guard let pending = contexts.removeFirst() else { return }
            switch pending {
            case .literal(let bytes):
                scratch.append(bytes)
            case .signIn(let credentials):
                if header.status == .ok {
                    signedIn = credentials
                } else {
                    signedIn = nil
                    signInFailed = true
                }
            case .valueHead:
                if let bytes = writeValueHead(status: header.status, body: body) { scratch.append(bytes) }
            case .valuePiece(let asked):
                let bytes = writeValuePiece(status: header.status, body: body, asked: asked)
                if let bytes { scratch.append(bytes) }
            }
        }
        output.replaceTranslated(after: textPending, with: &scratch)
        textPending = output.readableBytes
    }

    private func writeHead(
        _ status: Int,
        _ fields: [(String, String)],
        contentLength: UInt64?,
        keepAlive: Bool
    ) {
        let keep = keepAlive && !closeRequested
        scratch.append(
            HTTPResponseHead(status: status, fields: fields).encoded(
                contentLength: contentLength,
                date: currentDate(),
                keepAlive: keep
            )
        )
        settings.responses.count(status)
        if !keep { closeRequested = true }
    }

    private func writeText(
        _ status: Int,
        _ message: String,
        keepAlive: Bool,
        head: Bool,
        fields: [(String, String)] = []
    ) {
        let body = Array((message + "\n").utf8)
        writeHead(
            status,
            [("Content-Type", "text/plain; charset=utf-8")] + fields,
            contentLength: UInt64(body.count),
            keepAlive: keepAlive
        )
        if !head { scratch.append(body) }
    }

    /// The reply to a value response's first GET: the response's head, written to the scratch buffer; returns
    /// the bytes it carried that the response sends next, if any.
    private func writeValueHead(status: CachetStatus, body: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
        guard let response = value else { return nil }
        if !signInFailed, status == .ok || status == .rangeNotSatisfiable {
            guard let (total, tag, sliceStart) = CachetValueRange.decodeReply(body) else {
                value = nil
                let keepAlive = response.asked.keepAlive
                writeText(500, "the node's reply had no length", keepAlive: keepAlive, head: response.head)
                return nil
            }
            let bytes = UnsafeRawBufferPointer(rebasing: body[sliceStart...])
            return writeValueHead(status: status, total: total, tag: tag, bytes: bytes)
        }
        let keepAlive = response.asked.keepAlive
        let head = response.head
        value = nil
        if signInFailed { return refuseFailedSignIn(keepAlive: keepAlive, head: head) }
        switch status {
        case .notFound:
            writeText(404, "no value under this key", keepAlive: keepAlive, head: head)
        case .notAuthenticated:
            writeText(401, "this node has users: sign in", keepAlive: keepAlive, head: head, fields: Self.challenge)
        case .forbidden:
            writeText(403, "this user may not read this key", keepAlive: keepAlive, head: head)
        case .unavailable:
            writeText(503, "the key's owner cannot be reached: ask again", keepAlive: keepAlive, head: head)
        default:
            let message = String(decoding: body, as: UTF8.self)
            writeText(500, "the node answered \(status): \(message)", keepAlive: keepAlive, head: head)
        }
        return nil
    }

    /// A value response whose credentials were refused (the sign-in before its first GET failed): 401.
    private func refuseFailedSignIn(keepAlive: Bool, head: Bool) -> UnsafeRawBufferPointer? {
        signInFailed = false
        writeText(401, "the user or secret is not right", keepAlive: keepAlive, head: head, fields: Self.challenge)
        return nil
    }

    /// The first GET's reply, OK or RANGE_NOT_SATISFIABLE, read: the value's length and tag, and the bytes
    /// it carried. Writes the response's head; returns the bytes the response sends next, if any.
    private func writeValueHead(status: CachetStatus, total: UInt64, tag: UInt64, bytes: UnsafeRawBufferPointer)
        -> UnsafeRawBufferPointer?
    {
        guard var response = value else { return nil }
        let keepAlive = response.asked.keepAlive
        let head = response.head
        value = nil
        if signInFailed { return refuseFailedSignIn(keepAlive: keepAlive, head: head) }
        let etag = "\"" + String(tag, radix: 16) + "\""
        var fields: [(String, String)] = [
            ("Content-Type", response.contentType), ("Accept-Ranges", "bytes"), ("Cache-Control", "no-cache"),
            ("ETag", etag),
        ]
        if response.asked.ifNoneMatchNames(etag) {
            writeHead(304, fields, contentLength: nil, keepAlive: keepAlive)
            return nil
        }
        // A Range with an If-Range naming another version of the value: the whole value instead.
        var byteRange = response.range
        if let condition = response.asked.ifRange, condition != etag { byteRange = nil }
        let bounds: Range<UInt64>
        if let byteRange {
            guard let found = byteRange.bounds(total: total) else {
                writeHead(
                    416,
                    [
                        ("Content-Range", "bytes */\(total)"), ("Content-Type", response.contentType),
                        ("Accept-Ranges", "bytes"),
                    ],
                    contentLength: 0,
                    keepAlive: keepAlive
                )
                return nil
            }
            bounds = found
            fields.append(("Content-Range", "bytes \(bounds.lowerBound)-\(bounds.upperBound - 1)/\(total)"))
        } else {
            bounds = 0..<total
        }
        writeHead(byteRange == nil ? 200 : 206, fields, contentLength: UInt64(bounds.count), keepAlive: keepAlive)
        guard !head, !bounds.isEmpty else { return nil }
        // The bytes already read, if they start where the response does (they do not for a suffix, nor
        // when If-Range turned a range into the whole value).
        response.started = true
        response.tag = tag
        response.next = bounds.lowerBound
        response.end = bounds.upperBound
        let firstOffset = Self.firstOffset(response.range, head: head)
        var sent: UnsafeRawBufferPointer?
        if status == .ok && firstOffset == bounds.lowerBound {
            let taken = min(bytes.count, Int(bounds.count))
            sent = UnsafeRawBufferPointer(rebasing: bytes[..<taken])
            response.next += UInt64(taken)
        }
        if response.next < response.end { value = response }
        return sent
    }

    /// The offset the first GET of a response asked from.
    private static func firstOffset(_ range: HTTPValueRequest.ByteRange?, head: Bool) -> UInt64 {
        guard !head, let range, !range.isSuffix else { return 0 }
        return range.valueRange.offset
    }

    /// A later piece: returns its bytes, if it is of the same value; otherwise the response ends short.
    private func writeValuePiece(status: CachetStatus, body: UnsafeRawBufferPointer, asked: Int)
        -> UnsafeRawBufferPointer?
    {
        guard status == .ok, let (_, tag, sliceStart) = CachetValueRange.decodeReply(body) else {
            return writeValuePiece(tag: nil, bytes: nil, asked: asked)
        }
        return writeValuePiece(tag: tag, bytes: UnsafeRawBufferPointer(rebasing: body[sliceStart...]), asked: asked)
    }

    /// A later piece read: `tag` and `bytes` nil when the GET failed.
    private func writeValuePiece(tag: UInt64?, bytes: UnsafeRawBufferPointer?, asked: Int) -> UnsafeRawBufferPointer? {
        guard var response = value else { return nil }
        response.pieceAsked = false
        guard let tag, let bytes, tag == response.tag, !bytes.isEmpty, bytes.count <= asked else {
            // Replaced, gone, or unreadable while sent: the connection closes short of the Content-Length,
            // which tells the client the body is not whole.
            value = nil
            closeRequested = true
            settings.responses.countCutShort()
            return nil
        }
        let taken = min(bytes.count, Int(response.end - response.next))
        response.next += UInt64(taken)
        value = response.next < response.end ? response : nil
        return UnsafeRawBufferPointer(rebasing: bytes[..<taken])
    }

    /// Sends the reply to a GET of a range the response asked for, read from disk, straight to the socket:
    /// the response's head (or nothing, for a later piece) and the bytes in one `writev` from where they
    /// were read, instead of a native reply copied into the output and translated from there. Only while
    /// nothing waits in `output` (so this reply is the next one due and the order holds); what the socket
    /// does not take now is queued, translated. Returns false, doing nothing, when the reply is not one a
    /// value response waits for.
    func sendRangeReply(
        total: Int,
        tag: UInt64,
        bytes: UnsafeRawBufferPointer,
        output: inout CachetByteBuffer,
        send: DirectSend
    ) -> Bool {
        guard output.readableBytes == 0, let pending = contexts.first else { return false }
        let sent: UnsafeRawBufferPointer?
        scratch.clear()
        switch pending {
        case .valueHead:
            sent = writeValueHead(status: .ok, total: UInt64(total), tag: tag, bytes: bytes)
        case .valuePiece(let asked):
            sent = writeValuePiece(tag: tag, bytes: bytes, asked: asked)
        case .literal, .signIn:
            return false
        }
        _ = contexts.removeFirst()
        let head = UnsafeRawBufferPointer(scratch.readableRegion)
        let body = sent ?? UnsafeRawBufferPointer(start: nil, count: 0)
        send.send(head, body, queueingTheRestIn: &output)
        scratch.clear()
        textPending = output.readableBytes
        return true
    }
}
