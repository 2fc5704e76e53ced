import CachetTestSupport
import CachetWire
import Testing

/// What decoding one request frame of a stream produced.
enum DecodedRequest: Equatable {
    case command(CachetCommand, bytes: [UInt8])
    case bodyError(CachetWireError, header: CachetFrameHeader)
    case framingError(CachetWireError)
}

/// Decodes a request stream as a node would: whole frames, in order; a framing error ends the stream.
/// Returns the results and the number of bytes left over (a partial frame).
func decodeRequests(_ stream: [UInt8]) -> ([DecodedRequest], leftover: Int) {
    stream.withUnsafeBytes { buffer in
        var results: [DecodedRequest] = []
        var offset = 0
        while true {
            let frame: CachetFrame?
            do throws(CachetWireError) {
                frame = try CachetFrameDecoder.decodeFrame(in: buffer, at: offset)
            } catch {
                results.append(.framingError(error))
                return (results, 0)
            }
            guard let frame else { return (results, buffer.count - offset) }
            do throws(CachetWireError) {
                let command = try CachetCommand.decode(frame: frame, in: buffer)
                results.append(.command(command, bytes: Array(buffer[offset..<frame.end])))
            } catch {
                results.append(.bodyError(error, header: frame.header))
            }
            offset = frame.end
        }
    }
}

/// Feeds `stream` in chunks of the given sizes, as bytes would arrive from a socket, keeping a partial
/// frame until its end arrives; returns what was decoded.
func decodeInChunks(_ stream: [UInt8], sizes: (Int) -> Int) -> [DecodedRequest] {
    var results: [DecodedRequest] = []
    var pending: [UInt8] = []
    var position = 0
    var chunkIndex = 0
    while position < stream.count {
        let size = min(sizes(chunkIndex), stream.count - position)
        chunkIndex += 1
        pending += stream[position..<(position + size)]
        position += size
        let (decoded, leftover) = decodeRequests(pending)
        results += decoded
        if case .framingError = decoded.last { return results }
        pending = Array(pending.suffix(leftover))
    }
    return results
}

@Suite("Protocol vectors")
struct ProtocolVectorTests {
    static let vectors = ProtocolVector.loadAll()

    @Test func vectorsArePresent() {
        #expect(Self.vectors.count >= 20)
        for required in ["ping", "put-get", "stats", "payload-too-large", "truncated-frame", "unknown-opcode"] {
            #expect(Self.vectors.contains { $0.name == required }, "missing \(required).vector")
        }
    }

    @Test(arguments: vectors)
    func requestsDecodeAsTheRepliesSay(_ vector: ProtocolVector) throws {
        let (decoded, _) = decodeRequests(vector.sentBytes)
        let replies = vector.steps.compactMap { step -> [UInt8]? in
            switch step {
            case .expect(let bytes): return bytes
            case .expectHeader(let header): return [0, 0, 0, 8] + header
            default: return nil
            }
        }
        try #require(
            decoded.count == replies.count,
            "\(vector.name): \(decoded.count) requests, \(replies.count) replies"
        )
        let closes = vector.steps.contains(.close)
        for (request, replyBytes) in zip(decoded, replies) {
            let reply = try #require(try replyBytes.withUnsafeBytes { try CachetResponse.decode(from: $0) }).response
            switch request {
            case .command(let command, let bytes):
                #expect(
                    reply.status == .ok || reply.status == .notFound,
                    "\(vector.name): \(command) answered \(reply.status)"
                )
                #expect(reply.opcode == command.opcode)
                // Flags are reserved: the typed command does not carry them, so compare with them zeroed.
                var withoutFlags = bytes
                withoutFlags[6] = 0
                withoutFlags[7] = 0
                #expect(command.encoded(id: reply.id) == withoutFlags, "\(vector.name): re-encoding differs")
            case .bodyError(let error, let header):
                #expect(reply.status == error.status, "\(vector.name): \(error)")
                #expect(reply.bodyText == error.message)
                #expect(reply.opcode == header.opcode && reply.id == header.id)
                #expect(!error.closesConnection)
            case .framingError(let error):
                #expect(reply.status == error.status)
                #expect(reply.bodyText == error.message)
                #expect(reply.opcode == .none && reply.id == 0)
                #expect(error.closesConnection && closes)
            }
        }
    }

    @Test(arguments: vectors)
    func repliesRoundTripExactly(_ vector: ProtocolVector) throws {
        for step in vector.steps {
            guard case .expect(let bytes) = step else { continue }
            let (reply, end) = try #require(try bytes.withUnsafeBytes { try CachetResponse.decode(from: $0) })
            #expect(end == bytes.count)
            #expect(reply.encoded == bytes)
        }
    }

    @Test(arguments: vectors)
    func everyChunkingDecodesTheSame(_ vector: ProtocolVector) {
        let stream = vector.sentBytes
        let whole = decodeRequests(stream).0
        for size in 1...min(64, max(1, stream.count)) {
            #expect(decodeInChunks(stream, sizes: { _ in size }) == whole, "\(vector.name) in chunks of \(size)")
        }
        var random = SplitMix64(state: UInt64(stream.count))
        for _ in 0..<20 {
            #expect(decodeInChunks(stream, sizes: { _ in Int(random.next() % 40) + 1 }) == whole)
        }
    }
}
