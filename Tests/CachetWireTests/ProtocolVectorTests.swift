import CachetTestSupport
import CachetWire
import Testing

@Suite("Protocol vectors against the codec")
struct ProtocolVectorTests {
    static let vectors = ProtocolVector.loadAll()

    /// The vectors the specification promises, one per opcode and per error class.
    static let required = [
        "put-get", "get-missing", "del", "del-missing", "clear", "clear-prefixes", "lease", "get-ttl", "get-range",
        "put-parts", "stats", "ping",
        "put-with-ttl",
        "empty-value",
        "binary-key", "pipelined", "unknown-opcode", "unsupported-version", "empty-key", "key-too-long",
        "body-shorter-than-key", "trailing-bytes-after-key", "nonempty-ping-body", "payload-too-short",
        "payload-too-large", "truncated-frame", "reserved-flags", "request-flags",
    ]

    @Test func everyRequiredVectorIsPresent() {
        let names = Set(Self.vectors.map(\.name))
        for name in Self.required {
            #expect(names.contains(name), "Protocol/vectors/\(name).vector is missing")
        }
    }

    /// Each request decodes to what its reply says: OK and NOT_FOUND replies answer a command that
    /// re-encodes to the exact bytes sent; error replies carry the thrown error's status and message,
    /// echo the header (or opcode 0 and id 0 for framing errors), and are followed by `! close` exactly
    /// when the error closes the connection.
    @Test(arguments: vectors)
    func requestsDecodeAsTheRepliesSay(_ vector: ProtocolVector) throws {
        let decoded = decodeRequests(vector.sentBytes)
        let replies = vector.expectedReplies
        try #require(
            decoded.requests.count == replies.count,
            "\(vector.name): \(decoded.requests.count) requests, \(replies.count) replies"
        )
        for (request, expected) in zip(decoded.requests, replies) {
            let header = expected.header
            let version = header[0]
            let opcode = CachetOpcode(rawValue: header[1])
            let status = CachetStatus(rawValue: UInt16(header[2]) << 8 | UInt16(header[3]))
            let id = header[4...].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            #expect(version == CachetProtocol.version, "\(vector.name): replies are version 1")
            switch request {
            case .command(let command, let bytes):
                // A leased PUT carries its flag and token; a token nobody granted is NOT_STORED. A GET of a
                // range carries its flag and range, and one starting past the end is RANGE_NOT_SATISFIABLE.
                var isLeasedPut = false
                if case .leasedPut = command { isLeasedPut = true }
                var isRangedGet = false
                if case .rangedGet = command { isRangedGet = true }
                // An item's PUT is a command on the item (the codec reads its value field whole): NOT_STORED,
                // EXISTS, and BAD_REQUEST for a field the node cannot read are the node's answers to it.
                let isItem = CachetRequestFlags(rawValue: UInt16(bytes[6]) << 8 | UInt16(bytes[7])).contains(.item)
                #expect(
                    status == .ok || status == .notFound || (isLeasedPut && status == .notStored)
                        || (isRangedGet && status == .rangeNotSatisfiable)
                        || (isItem && [.notStored, .exists, .badRequest].contains(status)),
                    "\(vector.name): \(command.opcode) answered \(status)"
                )
                #expect(opcode == command.opcode)
                #expect(!expected.closesAfter, "\(vector.name): a valid request is not followed by a close")
                // The command carries no flags: re-encoding gives the bytes sent with the flags zeroed,
                // which are the bytes sent unless a vector shows flags; re-encoding with the flags sent
                // gives them exactly.
                var flagsZeroed = bytes
                flagsZeroed[6] = 0
                flagsZeroed[7] = 0
                let flags = CachetRequestFlags(rawValue: UInt16(bytes[6]) << 8 | UInt16(bytes[7]))
                #expect(
                    command.encoded(id: id) == (isLeasedPut || isRangedGet ? bytes : flagsZeroed),
                    "\(vector.name): re-encoding differs"
                )
                #expect(command.encoded(id: id, flags: flags) == bytes, "\(vector.name): re-encoding differs")
                if ![
                    "reserved-flags", "request-flags", "lease", "get-ttl", "get-range", "put-parts", "get-frames",
                    "items",
                ].contains(
                    vector.name
                ) {
                    #expect(bytes == flagsZeroed, "\(vector.name): requests send flags 0")
                }
                if case .exact(let reply) = expected.match, status != .notStored, status != .rangeNotSatisfiable {
                    checkOKBody(of: command, status: status, body: Array(reply.dropFirst(12)), in: vector)
                }
            case .bodyError(let error, let requestHeader):
                #expect(status == error.status, "\(vector.name): \(error)")
                #expect(opcode == requestHeader.opcode && id == requestHeader.id, "\(vector.name): header echoed")
                #expect(!error.closesConnection && !expected.closesAfter, "\(vector.name): stays open")
                #expect(expected.match == .exact(replyBytes(opcode, error, id: id)), "\(vector.name): \(error)")
            case .framingError(let error):
                #expect(status == error.status, "\(vector.name): \(error)")
                #expect(opcode == .none && id == 0, "\(vector.name): framing errors carry opcode 0 and id 0")
                #expect(error.closesConnection && expected.closesAfter, "\(vector.name): closes after the reply")
                #expect(expected.match == .exact(replyBytes(.none, error, id: 0)), "\(vector.name): \(error)")
            }
        }
        // A close that follows no fatal reply is the node seeing the client's end of stream.
        if let close = vector.steps.firstIndex(of: .close), !(replies.last?.closesAfter ?? false) {
            #expect(vector.steps[..<close].contains(.shutdown), "\(vector.name): the node closes for no reason")
        }
    }

    private func replyBytes(_ opcode: CachetOpcode, _ error: CachetWireError, id: UInt32) -> [UInt8] {
        CachetResponse(opcode: opcode, status: error.status, id: id, body: Array(error.message.utf8)).encoded
    }

    private func checkOKBody(of command: CachetCommand, status: CachetStatus, body: [UInt8], in vector: ProtocolVector)
    {
        switch (command, status) {
        case (.clear, .ok), (.clearPrefixes, .ok):
            #expect(body.count == CachetProtocol.clearReplySize, "\(vector.name): CLEAR reply is 16 bytes")
        case (.get, .ok):
            break  // the value
        case (.rangedGet, .ok):
            #expect(body.count >= 16, "\(vector.name): a range's reply starts with the value's length and tag")
        default:
            #expect(body.isEmpty, "\(vector.name): \(command.opcode) \(status) has an empty body")
        }
    }

    /// Every `<` line is one whole response frame that decodes and re-encodes to exactly its bytes.
    @Test(arguments: vectors)
    func repliesRoundTripExactly(_ vector: ProtocolVector) throws {
        for step in vector.steps {
            guard case .expect(let bytes) = step else { continue }
            let decoded = try bytes.withUnsafeBytes { try CachetResponse.decode(from: $0) }
            let (reply, end) = try #require(decoded, "\(vector.name): \(ProtocolVector.hex(bytes)) is not whole")
            #expect(end == bytes.count, "\(vector.name): one frame per '<' line")
            #expect(reply.version == CachetProtocol.version)
            #expect(reply.encoded == bytes)
            if reply.opcode == .clear && reply.status == .ok {
                #expect(try CachetClearResult(decoding: reply.body).encoded == reply.body)
            }
        }
    }

    /// The request stream decodes the same whole, one byte at a time, at every chunk size up to 64 (and
    /// a few larger ones up to the whole stream), and in seeded random chunks.
    @Test(arguments: vectors)
    func everyChunkingDecodesTheSame(_ vector: ProtocolVector) {
        let stream = vector.sentBytes
        let whole = decodeRequests(stream)
        var sizes = Array(1...max(1, min(64, stream.count)))
        sizes += [100, 1000, 4096, stream.count - 1, stream.count].filter { $0 > 64 && $0 <= stream.count }
        for size in sizes {
            #expect(ChunkedReceiver.feed(stream, sizes: { _ in size }) == whole, "\(vector.name) in chunks of \(size)")
        }
        for seed in UInt64(1)...20 {
            var random = SplitMix64(state: seed)
            let chunked = ChunkedReceiver.feed(stream, sizes: { _ in Int(random.next() % 97) + 1 })
            #expect(chunked == whole, "\(vector.name) in random chunks, seed \(seed)")
        }
    }

    /// The whole script, replayed through ``ProtocolVector/replay(on:)`` against a node made of the codec
    /// and a dictionary: values come back, CLEAR counts, errors answer, closes happen where written.
    /// (`items` is not: its conditional writes are the command layer's, which the model does not have; real
    /// nodes replay it, `NodeVectorReplayTests`.)
    @Test(arguments: vectors.filter { $0.name != "items" })
    func replaysAgainstACodecModelNode(_ vector: ProtocolVector) throws {
        let node = CodecModelNode()
        try vector.replay(on: node)
        #expect(!node.closed || vector.closes, "\(vector.name): the model closed without a '! close' line")
    }

    /// Whatever a vector leaves unread is a frame cut short, which only `truncated-frame` has.
    @Test(arguments: vectors)
    func onlyTheTruncatedFrameVectorLeavesBytesUnread(_ vector: ProtocolVector) {
        let stream = vector.sentBytes
        let decoded = decodeRequests(stream)
        let fatal = decoded.requests.contains { if case .framingError = $0 { true } else { false } }
        if vector.name == "truncated-frame" {
            #expect(decoded.consumed < stream.count)
            #expect(vector.steps.suffix(2) == [.shutdown, .close])
        } else if !fatal {
            #expect(decoded.consumed == stream.count, "\(vector.name): \(stream.count - decoded.consumed) bytes unread")
        }
    }
}
