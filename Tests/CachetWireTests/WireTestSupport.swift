import CachetTestSupport
import CachetWire
import Testing

/// What decoding one request frame of a stream produced, as a node would see it.
enum DecodedRequest: Equatable, CustomStringConvertible {
    /// A valid request, with the exact bytes of its frame.
    case command(CachetCommand, bytes: [UInt8])
    /// A whole frame whose header or body is wrong: answered, and the connection stays usable.
    case bodyError(CachetWireError, header: CachetFrameHeader)
    /// A length prefix out of range: answered with opcode 0 and id 0, then the connection closes.
    case framingError(CachetWireError)

    var description: String {
        switch self {
        case .command(let command, let bytes): return "\(command.opcode) (\(bytes.count) bytes)"
        case .bodyError(let error, let header): return "\(header.opcode) id \(header.id): \(error)"
        case .framingError(let error): return "framing: \(error)"
        }
    }
}

/// What a request stream decodes to: the requests in order and the bytes their whole frames used. After
/// a framing error (which ends the stream) `consumed` is where the bad frame starts; otherwise the bytes
/// past it are a partial frame.
struct DecodedStream: Equatable {
    var requests: [DecodedRequest] = []
    var consumed = 0
}

/// Decodes a request stream as a node does: whole frames in order; a framing error ends it.
/// - Parameters:
///   - stream: the bytes received.
///   - maximumPayloadLength: the node's `--max-frame`.
/// - Returns: the requests and the bytes they used.
func decodeRequests(
    _ stream: [UInt8],
    maximumPayloadLength: Int = CachetProtocol.defaultMaximumPayloadLength
) -> DecodedStream {
    stream.withUnsafeBytes { buffer in
        var decoded = DecodedStream()
        while true {
            let frame: CachetFrame?
            do throws(CachetWireError) {
                frame = try CachetFrameDecoder.decodeFrame(
                    in: buffer,
                    at: decoded.consumed,
                    maximumPayloadLength: maximumPayloadLength
                )
            } catch {
                decoded.requests.append(.framingError(error))
                return decoded
            }
            guard let frame else { return decoded }
            do throws(CachetWireError) {
                let command = try CachetCommand.decode(frame: frame, in: buffer)
                decoded.requests.append(.command(command, bytes: Array(buffer[decoded.consumed..<frame.end])))
            } catch {
                decoded.requests.append(.bodyError(error, header: frame.header))
            }
            decoded.consumed = frame.end
        }
    }
}

/// Decodes the first request of `bytes`, or `nil` when it is not whole yet.
func decodeOne(_ bytes: [UInt8]) -> DecodedRequest? {
    decodeRequests(bytes).requests.first
}

/// Calls the frame decoder on an array.
func decodeFrame(
    _ bytes: [UInt8],
    at offset: Int = 0,
    maximum: Int = CachetProtocol.defaultMaximumPayloadLength
) throws(CachetWireError) -> CachetFrame? {
    let result: Result<CachetFrame?, CachetWireError> = bytes.withUnsafeBytes { buffer in
        Result { () throws(CachetWireError) in
            try CachetFrameDecoder.decodeFrame(in: buffer, at: offset, maximumPayloadLength: maximum)
        }
    }
    return try result.get()
}

/// The error `decodeFrame` throws, or `nil` when it does not throw.
func frameError(_ bytes: [UInt8], maximum: Int = CachetProtocol.defaultMaximumPayloadLength) -> CachetWireError? {
    do throws(CachetWireError) {
        _ = try decodeFrame(bytes, maximum: maximum)
        return nil
    } catch {
        return error
    }
}

/// A receive buffer that is fed chunks the way a socket delivers them and decoded after each one, as a
/// node's connection does: whole frames are consumed, a partial frame waits, a framing error ends it.
///
/// Each time the decoder answers "need more bytes", this checks that the unread bytes really are less
/// than a whole frame, so a decoder that held back a complete frame (or one that returned a frame before
/// its end arrived) is caught.
struct ChunkedReceiver {
    private(set) var decoded = DecodedStream()
    private var pending: [UInt8] = []
    private(set) var ended = false

    mutating func receive(_ chunk: ArraySlice<UInt8>) {
        guard !ended else { return }
        pending += chunk
        let step = decodeRequests(pending)
        decoded.requests += step.requests
        decoded.consumed += step.consumed
        if case .framingError = step.requests.last {
            ended = true
            return
        }
        pending.removeFirst(step.consumed)
        if pending.count >= CachetProtocol.lengthPrefixSize {
            let length = pending.prefix(4).reduce(0) { $0 << 8 | Int($1) }
            #expect(pending.count < 4 + length, "the decoder left a whole frame of \(length) bytes unread")
        }
    }

    /// Feeds `stream` in chunks whose sizes `size(chunkIndex)` gives.
    static func feed(_ stream: [UInt8], sizes size: (Int) -> Int) -> DecodedStream {
        var receiver = ChunkedReceiver()
        var position = 0
        var index = 0
        while position < stream.count && !receiver.ended {
            let end = min(stream.count, position + max(1, size(index)))
            receiver.receive(stream[position..<end])
            position = end
            index += 1
        }
        return receiver.decoded
    }
}

/// A node reduced to the codec and a dictionary, answering synchronously: enough to replay the vectors'
/// semantics (values stored and returned, CLEAR's counts, error replies, closing) without sockets.
///
/// TTLs are stored but never reached (the vectors do not wait), and there are no memory limits.
final class CodecModelNode: ProtocolVectorConnection {
    struct Closed: Error {}

    private var input: [UInt8] = []
    private var output: [UInt8] = []
    private var entries: [[UInt8]: [UInt8]] = [:]
    private var ttls: [[UInt8]: UInt32] = [:]
    /// Values being received in parts, by key and upload id: the announced length and the bytes so far.
    private var uploads: [[UInt8]: (total: UInt64, bytes: [UInt8])] = [:]
    private var counters: [String: Int] = [:]
    private(set) var closed = false

    func send(_ bytes: [UInt8]) throws {
        guard !closed else { throw Closed() }
        input += bytes
        process()
    }

    func readBytes(_ count: Int) throws -> [UInt8] {
        guard output.count >= count else { throw Closed() }
        defer { output.removeFirst(count) }
        return Array(output.prefix(count))
    }

    func shutdownSending() throws {
        // End of stream: a partial frame is dropped without a reply, and the node closes.
        input.removeAll()
        closed = true
    }

    func waitForClose() -> Bool {
        closed && output.isEmpty
    }

    private func process() {
        let decoded = decodeRequests(input)
        input.removeFirst(decoded.consumed)
        for request in decoded.requests {
            switch request {
            case .framingError(let error):
                reply(.none, error.status, id: 0, Array(error.message.utf8))
                closed = true
                input.removeAll()
            case .bodyError(let error, let header):
                reply(header.opcode, error.status, id: header.id, Array(error.message.utf8))
            case .command(let command, let bytes):
                let id = bytes[8...11].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
                let flags = UInt16(bytes[6]) << 8 | UInt16(bytes[7])
                if case .put(let key, let value, _) = command, flags & CachetRequestFlags.part.rawValue != 0 {
                    answerPart(key: key, field: value, id: id)
                    continue
                }
                answer(command, id: id, withTTL: flags & CachetRequestFlags.ttl.rawValue != 0)
            }
        }
    }

    /// Takes a part of a value sent in parts (the codec checked its field): stored once it is the last.
    private func answerPart(key: [UInt8], field: [UInt8], id: UInt32) {
        let number = { (at: Int) in field[at..<(at + 8)].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } }
        let (upload, total, offset) = (number(0), number(8), number(16))
        let name = key + [UInt8](repeating: 0, count: 1) + withUnsafeBytes(of: upload) { Array($0) }
        var state = offset == 0 ? (total, []) : uploads[name] ?? (total, [])
        guard UInt64(state.1.count) == offset, state.0 == total else {
            uploads[name] = nil
            return reply(.put, .badRequest, id: id, Array("part out of order".utf8))
        }
        state.1 += field[24...]
        if UInt64(state.1.count) == total {
            uploads[name] = nil
            entries[key] = state.1
            ttls[key] = 0
        } else {
            uploads[name] = state
        }
        reply(.put, .ok, id: id)
    }

    /// A value's tag: the CRC-32 of its bytes, then their Adler-32.
    static func tag(_ value: [UInt8]) -> UInt64 {
        var crc: UInt32 = 0xffff_ffff
        for byte in value {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0xedb8_8320 : crc >> 1 }
        }
        var (a, b): (UInt32, UInt32) = (1, 0)
        for byte in value {
            a = (a + UInt32(byte)) % 65521
            b = (b + a) % 65521
        }
        return UInt64(~crc) << 32 | UInt64(b << 16 | a)
    }

    /// Answers `command`; `withTTL` for a GET with the `ttl` flag (no time passes in the model: the TTL left
    /// is the TTL stored).
    private func answer(_ command: CachetCommand, id: UInt32, withTTL: Bool) {
        switch command {
        case .leasedPut:
            // The model grants no leases: every token is unknown.
            reply(.put, .notStored, id: id, Array(CachetLeaseReply.notStoredMessage.utf8))
        case .put(let key, let value, let ttl):
            counters["puts", default: 0] += 1
            entries[key] = value
            ttls[key] = ttl
            reply(.put, .ok, id: id)
        case .get(let key):
            counters["gets", default: 0] += 1
            if let value = entries[key] {
                counters["hits", default: 0] += 1
                let ttl = ttls[key] ?? 0
                let left = withTTL ? [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: ttl >> $0) } : []
                reply(.get, .ok, id: id, left + value)
            } else {
                counters["misses", default: 0] += 1
                reply(.get, .notFound, id: id)
            }
        case .rangedGet(let key, let range):
            counters["gets", default: 0] += 1
            guard let value = entries[key] else {
                counters["misses", default: 0] += 1
                return reply(.get, .notFound, id: id)
            }
            counters["hits", default: 0] += 1
            var total: [UInt8] = []
            CachetFrameEncoder.appendBigEndian(UInt64(value.count), to: &total)
            CachetFrameEncoder.appendBigEndian(Self.tag(value), to: &total)
            guard let bounds = range.bounds(total: value.count) else {
                return reply(.get, .rangeNotSatisfiable, id: id, total)
            }
            reply(.get, .ok, id: id, total + value[bounds])
        case .delete(let key):
            counters["deletes", default: 0] += 1
            reply(.delete, entries.removeValue(forKey: key) == nil ? .notFound : .ok, id: id)
        case .clear:
            let bytes = entries.reduce(0) { $0 + $1.key.count + $1.value.count }
            let result = CachetClearResult(items: UInt64(entries.count), bytes: UInt64(bytes))
            entries.removeAll()
            reply(.clear, .ok, id: id, result.encoded)
        case .clearPrefixes(let prefixes):
            let removed = entries.filter { entry in prefixes.contains { entry.key.starts(with: $0) } }
            let bytes = removed.reduce(0) { $0 + $1.key.count + $1.value.count }
            for key in removed.keys { entries.removeValue(forKey: key) }
            reply(.clear, .ok, id: id, CachetClearResult(items: UInt64(removed.count), bytes: UInt64(bytes)).encoded)
        case .stats:
            var fields = ProtocolVector.requiredStatsFields.filter { $0 != "version" }.map { name in
                "\"\(name)\":\(name == "items" ? entries.count : counters[name, default: 0])"
            }
            fields.append("\"version\":\"model\"")
            reply(.stats, .ok, id: id, Array(("{" + fields.joined(separator: ",") + "}").utf8))
        case .ping:
            reply(.ping, .ok, id: id)
        case .auth:
            // A node without an auth file, as the vectors' node is.
            reply(
                .auth,
                .badRequest,
                id: id,
                Array("this node has no users (no --auth-file): every client may send every request".utf8)
            )
        case .watch, .unwatch:
            // The vectors do not watch: their runs and sequence numbers vary.
            reply(command.opcode, .badRequest, id: id, Array("the model does not watch".utf8))
        }
    }

    private func reply(_ opcode: CachetOpcode, _ status: CachetStatus, id: UInt32, _ body: [UInt8] = []) {
        CachetResponse(opcode: opcode, status: status, id: id, body: body).encode(to: &output)
    }
}
