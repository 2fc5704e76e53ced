import CachetStore
import CachetWire

/// What processing the buffered input ended with.
enum ProcessingResult {
    /// Every whole frame was answered; the input holds at most a partial frame of `frameLength` bytes
    /// (0 when not even its length prefix has arrived).
    case needMoreBytes(frameLength: Int)
    /// The output passed its high-water mark; the rest of the input waits until it drains.
    case outputFull
    /// A framing error was answered; the connection closes once the reply is sent.
    case closeAfterReply
}

/// Turns request frames into replies: decoding, dispatch to the store, reply encoding. No I/O.
///
/// One processor serves one event loop; it is called only on that loop's queue.
struct RequestProcessor {
    let store: CachetMemoryStore
    let counters: RequestCounters
    let maximumPayloadLength: Int
    let statistics: @Sendable () -> String

    /// Answers every whole frame in `input`, appending the replies to `output`.
    ///
    /// - Parameters:
    ///   - input: the connection's received bytes; whole frames are consumed.
    ///   - output: the connection's pending replies.
    ///   - outputLimit: stop once `output` holds more than this many bytes.
    ///   - now: the store's clock, read once per batch.
    /// - Returns: why processing stopped.
    func process(
        input: inout ByteBuffer,
        output: inout ByteBuffer,
        outputLimit: Int,
        now: UInt32
    ) -> ProcessingResult {
        while true {
            if output.readableBytes > outputLimit { return .outputFull }
            let region = input.wholeRegion
            let frame: CachetFrame?
            do {
                frame = try CachetFrameDecoder.decodeFrame(
                    in: region,
                    at: input.readIndex,
                    maximumPayloadLength: maximumPayloadLength
                )
            } catch {
                RequestCounters.bump(counters.badRequests)
                appendError(error, opcode: .none, id: 0, to: &output)
                input.moveReadIndex(to: input.writeIndex)
                return .closeAfterReply
            }
            guard let frame else {
                let available = input.readableBytes
                if available >= CachetProtocol.lengthPrefixSize {
                    let length = Int(region.loadUnaligned(fromByteOffset: input.readIndex, as: UInt32.self).bigEndian)
                    return .needMoreBytes(frameLength: CachetProtocol.lengthPrefixSize + length)
                }
                return .needMoreBytes(frameLength: 0)
            }
            dispatch(frame, in: region, output: &output, now: now)
            input.moveReadIndex(to: frame.end)
        }
    }

    /// Answers one request frame.
    @inline(__always)
    private func dispatch(_ frame: CachetFrame, in buffer: UnsafeRawBufferPointer, output: inout ByteBuffer, now: UInt32) {
        let header = frame.header
        do {
            try CachetFrameDecoder.validateRequestHeader(header)
            switch header.opcode {
            case .get:
                let key = try CachetBodyDecoder.decodeKey(in: buffer, body: frame.body)
                get(UnsafeRawBufferPointer(rebasing: buffer[key]), id: header.id, output: &output, now: now)
            case .put:
                let put = try CachetBodyDecoder.decodePut(in: buffer, body: frame.body)
                self.put(put, in: buffer, id: header.id, output: &output, now: now)
            case .delete:
                let key = try CachetBodyDecoder.decodeKey(in: buffer, body: frame.body)
                RequestCounters.bump(counters.deletes)
                let removed = store.remove(key: UnsafeRawBufferPointer(rebasing: buffer[key]), now: now)
                appendReply(opcode: .delete, status: removed ? .ok : .notFound, id: header.id, to: &output)
            case .clear:
                try CachetBodyDecoder.decodeEmpty(body: frame.body)
                let removed = store.removeAll()
                let body = CachetClearResult(items: UInt64(removed.items), bytes: UInt64(removed.bytes)).encoded
                body.withUnsafeBytes { appendReply(opcode: .clear, status: .ok, id: header.id, body: $0, to: &output) }
            case .stats:
                try CachetBodyDecoder.decodeEmpty(body: frame.body)
                var json = statistics()
                json.withUTF8 { appendReply(opcode: .stats, status: .ok, id: header.id, body: UnsafeRawBufferPointer($0), to: &output) }
            default:
                try CachetBodyDecoder.decodeEmpty(body: frame.body)
                appendReply(opcode: .ping, status: .ok, id: header.id, to: &output)
            }
        } catch {
            RequestCounters.bump(counters.badRequests)
            appendError(error, opcode: header.opcode, id: header.id, to: &output)
        }
    }

    @inline(__always)
    private func get(_ key: UnsafeRawBufferPointer, id: UInt32, output: inout ByteBuffer, now: UInt32) {
        RequestCounters.bump(counters.gets)
        let hit: Bool? = store.withValue(forKey: key, now: now) { value, _ in
            appendReply(opcode: .get, status: .ok, id: id, body: value, to: &output)
            return true
        }
        if hit == nil {
            RequestCounters.bump(counters.misses)
            appendReply(opcode: .get, status: .notFound, id: id, to: &output)
        } else {
            RequestCounters.bump(counters.hits)
        }
    }

    @inline(__always)
    private func put(_ put: CachetPutBody, in buffer: UnsafeRawBufferPointer, id: UInt32, output: inout ByteBuffer, now: UInt32) {
        RequestCounters.bump(counters.puts)
        let expiry = Self.expiry(ttl: put.ttl, now: now)
        let outcome = store.put(
            key: UnsafeRawBufferPointer(rebasing: buffer[put.key]),
            value: UnsafeRawBufferPointer(rebasing: buffer[put.value]),
            expiry: expiry,
            now: now
        )
        switch outcome {
        case .stored:
            appendReply(opcode: .put, status: .ok, id: id, to: &output)
        case .tooLarge:
            appendMessage(
                "entry of \(put.key.count + put.value.count) bytes does not fit the memory limit of \(store.statistics.memoryLimit) bytes",
                status: .tooLarge,
                opcode: .put,
                id: id,
                to: &output
            )
        }
    }

    /// The absolute expiry for a TTL: 0 stays 0 (never), otherwise now + ttl, saturating.
    static func expiry(ttl: UInt32, now: UInt32) -> UInt32 {
        guard ttl > 0 else { return 0 }
        let (sum, overflow) = now.addingReportingOverflow(ttl)
        return overflow ? UInt32.max : sum
    }
}

// MARK: - Reply encoding

@inline(__always)
func appendReply(opcode: CachetOpcode, status: CachetStatus, id: UInt32, body: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0), to output: inout ByteBuffer) {
    output.reserveWritable(CachetProtocol.frameOverhead + body.count)
    CachetFrameEncoder.writePrefixAndHeader(
        to: output.writePointer,
        bodyLength: body.count,
        header: CachetFrameHeader(opcode: opcode, word: status.rawValue, id: id)
    )
    output.moveWriteIndex(forwardBy: CachetProtocol.frameOverhead)
    if body.count > 0 { output.append(body) }
}

func appendError(_ error: CachetWireError, opcode: CachetOpcode, id: UInt32, to output: inout ByteBuffer) {
    appendMessage(error.message, status: error.status, opcode: opcode, id: id, to: &output)
}

func appendMessage(_ message: String, status: CachetStatus, opcode: CachetOpcode, id: UInt32, to output: inout ByteBuffer) {
    var message = message
    message.withUTF8 { appendReply(opcode: opcode, status: status, id: id, body: UnsafeRawBufferPointer($0), to: &output) }
}
