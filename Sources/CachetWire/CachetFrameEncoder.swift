/// Writes frames. The raw writer serves the node's output buffers; the `[UInt8]` builders serve clients
/// and tests. See `Protocol/PROTOCOL.md`, "Frames".
public enum CachetFrameEncoder {
    /// Writes the 4-byte length prefix and the 8-byte header (12 bytes) at `pointer`.
    ///
    /// A payload longer than the format's 4294967295-byte ceiling is announced as exactly that ceiling,
    /// which any node refuses as TOO_LARGE before reading the payload, rather than as a shorter length
    /// that would let the payload's tail be read as further frames.
    ///
    /// - Parameters:
    ///   - pointer: where to write; must have room for ``CachetProtocol/frameOverhead`` bytes.
    ///   - bodyLength: bytes of body that will follow the header.
    ///   - header: the header to write.
    @inlinable
    public static func writePrefixAndHeader(
        to pointer: UnsafeMutableRawPointer,
        bodyLength: Int,
        header: CachetFrameHeader
    ) {
        pointer.storeBytes(
            of: UInt32(clamping: CachetProtocol.headerSize + bodyLength).bigEndian,
            as: UInt32.self
        )
        pointer.storeBytes(of: header.version, toByteOffset: 4, as: UInt8.self)
        pointer.storeBytes(of: header.opcode.rawValue, toByteOffset: 5, as: UInt8.self)
        pointer.storeBytes(of: header.word.bigEndian, toByteOffset: 6, as: UInt16.self)
        pointer.storeBytes(of: header.id.bigEndian, toByteOffset: 8, as: UInt32.self)
    }

    /// Appends a whole frame (prefix, header, body) to `output`.
    ///
    /// - Parameters:
    ///   - header: the frame's header.
    ///   - body: the body bytes.
    ///   - output: the buffer to append to.
    @inlinable
    public static func appendFrame(header: CachetFrameHeader, body: UnsafeRawBufferPointer, to output: inout [UInt8]) {
        appendPrefixAndHeader(header: header, bodyLength: body.count, to: &output)
        output.append(contentsOf: body)
    }

    /// Appends the prefix and header of a frame whose `bodyLength` body bytes the caller appends next.
    ///
    /// - Parameters:
    ///   - header: the frame's header.
    ///   - bodyLength: bytes of body the caller will append.
    ///   - output: the buffer to append to.
    @inlinable
    public static func appendPrefixAndHeader(header: CachetFrameHeader, bodyLength: Int, to output: inout [UInt8]) {
        withUnsafeTemporaryAllocation(byteCount: CachetProtocol.frameOverhead, alignment: 1) { scratch in
            writePrefixAndHeader(to: scratch.baseAddress!, bodyLength: bodyLength, header: header)
            output.append(contentsOf: UnsafeRawBufferPointer(scratch))
        }
    }

    /// Appends a big-endian integer.
    /// - Parameters:
    ///   - value: the integer.
    ///   - output: the buffer to append to.
    @inlinable
    public static func appendBigEndian<T: FixedWidthInteger>(_ value: T, to output: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { output.append(contentsOf: $0) }
    }
}

/// A request with its body decoded into owned bytes: what clients build and tests compare.
///
/// The node's hot path does not use this type; it decodes in place with ``CachetFrameDecoder`` and
/// ``CachetBodyDecoder``.
public enum CachetCommand: Hashable, Sendable {
    /// Store `value` under `key` for `ttl` seconds (0 = no expiry).
    case put(key: [UInt8], value: [UInt8], ttl: UInt32)
    /// A PUT with the lease `token` a GET's miss granted (`Protocol/PROTOCOL.md`, "Leases"): encoded with
    /// the ``CachetRequestFlags/lease`` flag and the token before the body.
    case leasedPut(key: [UInt8], value: [UInt8], ttl: UInt32, token: UInt64)
    /// Read the value under `key`.
    case get(key: [UInt8])
    /// Read part of the value under `key` (`Protocol/PROTOCOL.md`, "GET of a range"): a GET with the
    /// ``CachetRequestFlags/range`` flag and the range after the key.
    case rangedGet(key: [UInt8], range: CachetValueRange)
    /// Remove `key`.
    case delete(key: [UInt8])
    /// Remove every entry.
    case clear
    /// Remove the entries whose keys start with one of `prefixes` (1 to
    /// ``CachetBodyDecoder/maximumClearPrefixes`` of them, each non-empty): a CLEAR with a body.
    case clearPrefixes([[UInt8]])
    /// Read the node's counters.
    case stats
    /// Ask for an empty OK reply.
    case ping
    /// Authenticate the connection as `user` with `secret` (`Protocol/PROTOCOL.md`, "AUTH").
    case auth(user: [UInt8], secret: [UInt8])
    /// Turn the connection into a stream of changes (`Protocol/PROTOCOL.md`, "WATCH").
    case watch(CachetWatchRequest)
    /// End the connection's WATCH.
    case unwatch

    /// The opcode of this command.
    public var opcode: CachetOpcode {
        switch self {
        case .put, .leasedPut: return .put
        case .get, .rangedGet: return .get
        case .delete: return .delete
        case .clear, .clearPrefixes: return .clear
        case .stats: return .stats
        case .ping: return .ping
        case .auth: return .auth
        case .watch: return .watch
        case .unwatch: return .unwatch
        }
    }

    /// Appends this command as a request frame.
    ///
    /// A key longer than 65535 bytes cannot be described by the 16-bit `key_len`; it is announced as
    /// 65535 bytes, which any node refuses as TOO_LARGE (keys are at most 4096 bytes), so the request
    /// fails instead of being read as a shorter key followed by the rest of the bytes.
    ///
    /// - Parameters:
    ///   - id: the request id the response will echo.
    ///   - flags: the request flags (`Protocol/PROTOCOL.md`, "Request flags"); none by default, which is
    ///     what a client that is not a node sends, but for ``CachetRequestFlags/cluster``.
    ///   - output: the buffer to append to.
    public func encode(id: UInt32, flags: CachetRequestFlags = [], to output: inout [UInt8]) {
        var flags = flags
        if case .leasedPut = self { flags.insert(.lease) }
        if case .rangedGet = self { flags.insert(.range) }
        let header = CachetFrameHeader(opcode: opcode, word: flags.rawValue, id: id)
        switch self {
        case .leasedPut(let key, let value, let ttl, let token):
            CachetFrameEncoder.appendPrefixAndHeader(
                header: header,
                bodyLength: 8 + CachetProtocol.putBodyPrefixSize + key.count + value.count,
                to: &output
            )
            CachetFrameEncoder.appendBigEndian(token, to: &output)
            CachetFrameEncoder.appendBigEndian(ttl, to: &output)
            CachetFrameEncoder.appendBigEndian(UInt16(clamping: key.count), to: &output)
            output.append(contentsOf: key)
            output.append(contentsOf: value)
        case .put(let key, let value, let ttl):
            CachetFrameEncoder.appendPrefixAndHeader(
                header: header,
                bodyLength: CachetProtocol.putBodyPrefixSize + key.count + value.count,
                to: &output
            )
            CachetFrameEncoder.appendBigEndian(ttl, to: &output)
            CachetFrameEncoder.appendBigEndian(UInt16(clamping: key.count), to: &output)
            output.append(contentsOf: key)
            output.append(contentsOf: value)
        case .get(let key), .delete(let key):
            CachetFrameEncoder.appendPrefixAndHeader(
                header: header,
                bodyLength: CachetProtocol.keyBodyPrefixSize + key.count,
                to: &output
            )
            CachetFrameEncoder.appendBigEndian(UInt16(clamping: key.count), to: &output)
            output.append(contentsOf: key)
        case .rangedGet(let key, let range):
            CachetFrameEncoder.appendPrefixAndHeader(
                header: header,
                bodyLength: CachetProtocol.keyBodyPrefixSize + key.count + CachetValueRange.encodedSize,
                to: &output
            )
            CachetFrameEncoder.appendBigEndian(UInt16(clamping: key.count), to: &output)
            output.append(contentsOf: key)
            CachetFrameEncoder.appendBigEndian(range.offset, to: &output)
            CachetFrameEncoder.appendBigEndian(range.length, to: &output)
        case .clear, .stats, .ping, .unwatch:
            CachetFrameEncoder.appendPrefixAndHeader(header: header, bodyLength: 0, to: &output)
        case .watch(let request):
            let body = request.encoded
            CachetFrameEncoder.appendPrefixAndHeader(header: header, bodyLength: body.count, to: &output)
            output.append(contentsOf: body)
        case .clearPrefixes(let prefixes):
            let bodyLength = prefixes.reduce(0) { $0 + 2 + $1.count }
            CachetFrameEncoder.appendPrefixAndHeader(header: header, bodyLength: bodyLength, to: &output)
            for prefix in prefixes {
                CachetFrameEncoder.appendBigEndian(UInt16(clamping: prefix.count), to: &output)
                output.append(contentsOf: prefix)
            }
        case .auth(let user, let secret):
            CachetFrameEncoder.appendPrefixAndHeader(
                header: header,
                bodyLength: 2 + user.count + secret.count,
                to: &output
            )
            CachetFrameEncoder.appendBigEndian(UInt16(clamping: user.count), to: &output)
            output.append(contentsOf: user)
            output.append(contentsOf: secret)
        }
    }

    /// This command as a request frame.
    /// - Parameters:
    ///   - id: the request id.
    ///   - flags: the request flags; none by default.
    /// - Returns: the frame's bytes.
    public func encoded(id: UInt32, flags: CachetRequestFlags = []) -> [UInt8] {
        var output: [UInt8] = []
        encode(id: id, flags: flags, to: &output)
        return output
    }

    /// A member's notice to a peer that it is leaving the cluster: a PING with `forwarded` and `leaving`
    /// whose body is the sender's member id (`Protocol/PROTOCOL.md`, "Request flags").
    /// - Parameters:
    ///   - memberID: the leaving member's id.
    ///   - id: the request id.
    /// - Returns: the frame's bytes.
    public static func leavingNotice(memberID: String, id: UInt32) -> [UInt8] {
        peerPing(flags: [.forwarded, .leaving], body: Array(memberID.utf8), id: id)
    }

    /// A PING between members with `flags` and `body`: the leaving notice, the hold check, the view check.
    static func peerPing(flags: CachetRequestFlags, body: [UInt8], id: UInt32) -> [UInt8] {
        var output: [UInt8] = []
        body.withUnsafeBytes {
            CachetFrameEncoder.appendFrame(
                header: CachetFrameHeader(opcode: .ping, word: flags.rawValue, id: id),
                body: $0,
                to: &output
            )
        }
        return output
    }

    /// Decodes a request frame's body into a command.
    ///
    /// - Parameters:
    ///   - frame: a frame found by ``CachetFrameDecoder/decodeFrame(in:at:maximumPayloadLength:)``.
    ///   - buffer: the buffer it was found in.
    /// - Returns: the command.
    /// - Throws: ``CachetWireError`` for a bad version, an unknown opcode or a malformed body.
    public static func decode(frame: CachetFrame, in buffer: UnsafeRawBufferPointer) throws(CachetWireError)
        -> CachetCommand
    {
        try CachetFrameDecoder.validateRequestHeader(frame.header)
        switch frame.header.opcode {
        case .put:
            let leased = frame.header.flags & CachetRequestFlags.lease.rawValue != 0
            let (put, token) = try CachetBodyDecoder.decodePut(in: buffer, body: frame.body, leased: leased)
            if frame.header.flags & CachetRequestFlags.part.rawValue != 0 {
                // A part: checked as a node checks it; its value field is the part (id, length, offset, bytes).
                guard !leased else { throw CachetUploadPart.leasedPartError }
                _ = try CachetUploadPart.decode(in: buffer, value: put.value)
            }
            let (key, value) = (Array(buffer[put.key]), Array(buffer[put.value]))
            return leased
                ? .leasedPut(key: key, value: value, ttl: put.ttl, token: token)
                : .put(key: key, value: value, ttl: put.ttl)
        case .get:
            if frame.header.flags & CachetRequestFlags.range.rawValue != 0 {
                let (key, range) = try CachetBodyDecoder.decodeRangedKey(in: buffer, body: frame.body)
                return .rangedGet(key: Array(buffer[key]), range: range)
            }
            return .get(key: Array(buffer[try CachetBodyDecoder.decodeKey(in: buffer, body: frame.body)]))
        case .delete:
            return .delete(key: Array(buffer[try CachetBodyDecoder.decodeKey(in: buffer, body: frame.body)]))
        case .clear:
            let prefixes = try CachetBodyDecoder.decodeClear(in: buffer, body: frame.body)
            return prefixes.isEmpty ? .clear : .clearPrefixes(prefixes)
        case .stats:
            try CachetBodyDecoder.decodeEmpty(body: frame.body)
            return .stats
        case .auth:
            let (user, secret) = try CachetBodyDecoder.decodeAuth(in: buffer, body: frame.body)
            return .auth(user: Array(buffer[user]), secret: Array(buffer[secret]))
        case .watch:
            return .watch(try CachetWatchRequest(decoding: buffer, body: frame.body))
        case .unwatch:
            try CachetBodyDecoder.decodeEmpty(body: frame.body)
            return .unwatch
        default:
            try CachetBodyDecoder.decodeEmpty(body: frame.body)
            return .ping
        }
    }
}

/// A response with its body as owned bytes: what clients read.
public struct CachetResponse: Hashable, Sendable {
    /// The echoed opcode.
    public var opcode: CachetOpcode
    /// The outcome.
    public var status: CachetStatus
    /// The echoed request id.
    public var id: UInt32
    /// The body: a value, a CLEAR count, STATS JSON, or a UTF-8 error message.
    public var body: [UInt8]
    /// The version byte of the response.
    public var version: UInt8

    /// Creates a response.
    /// - Parameters:
    ///   - opcode: the echoed opcode.
    ///   - status: the outcome.
    ///   - id: the echoed id.
    ///   - body: the body bytes.
    ///   - version: the version byte; ``CachetProtocol/version`` by default.
    public init(
        opcode: CachetOpcode,
        status: CachetStatus,
        id: UInt32,
        body: [UInt8] = [],
        version: UInt8 = CachetProtocol.version
    ) {
        self.opcode = opcode
        self.status = status
        self.id = id
        self.body = body
        self.version = version
    }

    /// Appends this response as a frame.
    /// - Parameter output: the buffer to append to.
    public func encode(to output: inout [UInt8]) {
        let header = CachetFrameHeader(version: version, opcode: opcode, word: status.rawValue, id: id)
        body.withUnsafeBytes { CachetFrameEncoder.appendFrame(header: header, body: $0, to: &output) }
    }

    /// This response as a frame.
    public var encoded: [UInt8] {
        var output: [UInt8] = []
        encode(to: &output)
        return output
    }

    /// Decodes the reply frame at `offset` with ``CachetReplyDecoder`` and copies its body.
    ///
    /// - Parameters:
    ///   - buffer: bytes received.
    ///   - offset: where the frame starts.
    ///   - maximumPayloadLength: the largest payload accepted.
    /// - Returns: the response and the offset just past it, or `nil` when more bytes are needed.
    /// - Throws: ``CachetWireError`` when the length prefix is out of range.
    public static func decode(
        from buffer: UnsafeRawBufferPointer,
        at offset: Int = 0,
        maximumPayloadLength: Int = Int(UInt32.max)
    ) throws(CachetWireError) -> (response: CachetResponse, end: Int)? {
        guard
            let frame = try CachetReplyDecoder.decodeReply(
                in: buffer,
                at: offset,
                maximumPayloadLength: maximumPayloadLength
            )
        else {
            return nil
        }
        return (CachetResponse(frame: frame, in: buffer), frame.end)
    }

    /// The body read as UTF-8 (an error message, or STATS JSON), with invalid bytes replaced.
    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// The body of a CLEAR reply: how many entries and bytes were removed.
public struct CachetClearResult: Hashable, Sendable {
    /// Entries removed.
    public var items: UInt64
    /// Bytes of keys and values removed.
    public var bytes: UInt64

    /// Creates a result.
    /// - Parameters:
    ///   - items: entries removed.
    ///   - bytes: bytes removed.
    public init(items: UInt64, bytes: UInt64) {
        self.items = items
        self.bytes = bytes
    }

    /// The 16-byte reply body.
    public var encoded: [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(CachetProtocol.clearReplySize)
        CachetFrameEncoder.appendBigEndian(items, to: &output)
        CachetFrameEncoder.appendBigEndian(bytes, to: &output)
        return output
    }

    /// Reads a CLEAR reply body.
    /// - Parameter body: the reply body.
    /// - Throws: ``CachetWireError`` `malformedReply` when the body is not 16 bytes.
    public init(decoding body: [UInt8]) throws(CachetWireError) {
        guard body.count == CachetProtocol.clearReplySize else {
            throw CachetWireError(code: .malformedReply, message: "CLEAR reply of \(body.count) bytes, expected 16")
        }
        var items: UInt64 = 0
        var bytes: UInt64 = 0
        for index in 0..<8 {
            items = items << 8 | UInt64(body[index])
            bytes = bytes << 8 | UInt64(body[8 + index])
        }
        self.init(items: items, bytes: bytes)
    }
}
