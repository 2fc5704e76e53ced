import CachetIO
import CachetStore
import CachetWire

/// WATCH on the node's connections (`Protocol/PROTOCOL.md`, "WATCH"): a connection that sent WATCH is
/// sent EVENT frames from the ``NodeWatchHub`` on its own loop, up to the hub's send limit, and answers
/// only UNWATCH and PING until it sends UNWATCH.
extension NodeIOQueue {
    /// Starts a WATCH: registers it, answers OK with the position the stream starts after (a GAP first
    /// when a resume cannot be served), then sends what the ring holds after it.
    func startWatch(_ request: CachetWatchRequest, id: UInt32, for connection: Connection) {
        let hub = processor.watches
        let confined = LoopConfined(connection)
        let stream = WatchStream(request: request, id: id) { [self] in
            execute { [self] in drainWatch(confined.value) }
        }
        if let previous = connection.watch { hub.unregister(previous) }
        connection.watch = stream
        hub.register(stream) { [self] position, gap in
            execute { [self] in
                let connection = confined.value
                guard connection.watch === stream, !connection.isClosed else { return }
                resume(connection) { _, output, _ in
                    var body: [UInt8] = []
                    CachetFrameEncoder.appendBigEndian(position.run, to: &body)
                    CachetFrameEncoder.appendBigEndian(position.sequence, to: &body)
                    body.withUnsafeBytes { appendReply(opcode: .watch, status: .ok, id: id, body: $0, to: &output) }
                    if gap {
                        let frame = CachetEvent(kind: .gap, sequence: position.sequence, key: []).encoded(id: id)
                        frame.withUnsafeBytes { output.append($0) }
                    }
                }
                drainWatch(connection)
            }
        }
    }

    /// Sends a watcher its next changes while its queued output is under the send limit; the rest waits
    /// for its peer to read (``handle(_:mask:now:)`` drains again once the socket takes bytes).
    func drainWatch(_ connection: Connection, settling: Bool = true) {
        guard let stream = connection.watch, !connection.isClosed else { return }
        let hub = processor.watches
        var sent = false
        while true {
            let room = hub.sendLimit - connection.output.readableBytes
            guard room > 0 else { break }
            let (gap, changes, more) = hub.next(for: stream, budget: room)
            if gap == nil && changes.isEmpty && !more { break }
            var frames: [UInt8] = []
            frames.reserveCapacity(min(room, 64 << 10))
            if let gap {
                CachetEvent(kind: .gap, sequence: gap, key: []).encoded(id: stream.id).withUnsafeBytes {
                    frames.append(contentsOf: $0)
                }
            }
            for (sequence, change) in changes {
                Self.appendEvent(sequence, change, for: stream, to: &frames)
            }
            frames.withUnsafeBytes { connection.output.append($0) }
            sent = true
            guard send(connection) else { return }
            if !more { break }
        }
        if sent && settling { settle(connection, now: CachetClock.now()) }
    }

    /// One change as the watcher asked for it: the value only with `includesValues`, up to its length limit.
    static func appendEvent(
        _ sequence: UInt64,
        _ change: NodeWatchHub.Change,
        for stream: WatchStream,
        to frames: inout [UInt8]
    ) {
        let request = stream.request
        var value = request.includesValues ? change.value : nil
        var omitted = request.includesValues && change.valueOmitted
        if let kept = value, kept.count > Int(request.maximumValueLength) {
            value = nil
            omitted = true
        }
        CachetEvent.appendFrame(
            id: stream.id,
            kind: change.kind,
            sequence: sequence,
            ttl: change.ttl,
            key: change.key,
            value: value,
            valueOmitted: value == nil && omitted,
            to: &frames
        )
    }

    /// The input of a watching connection: UNWATCH ends the watch (and what follows it is served as usual),
    /// PING is answered, anything else is BAD_REQUEST.
    func processWatching(_ connection: Connection, now: UInt32) {
        while let stream = connection.watch {
            let region = connection.input.wholeRegion
            let frame: CachetFrame?
            do {
                frame = try CachetFrameDecoder.decodeFrame(
                    in: region,
                    at: connection.input.readIndex,
                    maximumPayloadLength: processor.maximumPayloadLength
                )
            } catch {
                appendError(error, opcode: .none, id: 0, to: &connection.output)
                connection.input.moveReadIndex(to: connection.input.writeIndex)
                beginClosing(connection)
                break
            }
            guard let frame else {
                let available = connection.input.readableBytes
                let length =
                    available >= CachetProtocol.lengthPrefixSize
                    ? CachetProtocol.lengthPrefixSize
                        + Int(
                            region.loadUnaligned(fromByteOffset: connection.input.readIndex, as: UInt32.self).bigEndian
                        )
                    : 0
                connection.phase = .reading(frameLength: length)
                break
            }
            connection.input.moveReadIndex(to: frame.end)
            let header = frame.header
            switch header.opcode {
            case .unwatch:
                processor.watches.unregister(stream)
                connection.watch = nil
                appendReply(opcode: .unwatch, status: .ok, id: header.id, to: &connection.output)
                connection.phase = .reading(frameLength: 0)
                // The requests after it are served as on any connection.
                process(connection, now: now)
                return
            case .ping:
                appendReply(opcode: .ping, status: .ok, id: header.id, to: &connection.output)
            default:
                appendMessage(
                    "this connection is watching: it answers only UNWATCH and PING until UNWATCH",
                    status: .badRequest,
                    opcode: header.opcode,
                    id: header.id,
                    to: &connection.output
                )
            }
        }
        _ = send(connection)
    }
}
