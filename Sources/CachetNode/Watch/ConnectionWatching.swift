import CachetIO
import CachetStore
import CachetWire

/// WATCH on the node's connections (`Protocol/PROTOCOL.md`, "WATCH"): a connection that sent WATCH is
/// sent EVENT frames from the ``NodeWatchHub`` on its own loop, up to the hub's send limit, and answers
/// only UNWATCH and PING until it sends UNWATCH.
///
/// One per loop, a collaborator of its ``NodeIOQueue``; used only on the loop's queue (`@unchecked
/// Sendable` for the completions that hop back there).
final class ConnectionWatching: @unchecked Sendable {
    /// The loop whose connections watch.
    unowned let host: NodeIOQueue
    /// The node's changes, shared by every loop.
    let hub: NodeWatchHub
    /// The longest request frame a watching connection may send.
    let maximumPayloadLength: Int

    init(host: NodeIOQueue, hub: NodeWatchHub, maximumPayloadLength: Int) {
        self.host = host
        self.hub = hub
        self.maximumPayloadLength = maximumPayloadLength
    }

    /// Starts a WATCH: registers it, answers OK with the position the stream starts after (a GAP first
    /// when a resume cannot be served), then sends what the ring holds after it.
    func start(_ request: CachetWatchRequest, id: UInt32, for connection: Connection) {
        let confined = LoopConfined(connection)
        let stream = WatchStream(request: request, id: id) { [self] in
            host.execute { [self] in drain(confined.value) }
        }
        if let previous = connection.watch { hub.unregister(previous) }
        connection.watch = stream
        hub.register(stream) { [self] position, gap in
            host.execute { [self] in
                let connection = confined.value
                guard connection.watch === stream, !connection.isClosed else { return }
                host.resume(connection) { _, output, _ in
                    var body: [UInt8] = []
                    CachetFrameEncoder.appendBigEndian(position.run, to: &body)
                    CachetFrameEncoder.appendBigEndian(position.sequence, to: &body)
                    body.withUnsafeBytes { appendReply(opcode: .watch, status: .ok, id: id, body: $0, to: &output) }
                    if gap {
                        let frame = CachetEvent(kind: .gap, sequence: position.sequence, key: []).encoded(id: id)
                        frame.withUnsafeBytes { output.append($0) }
                    }
                }
                drain(connection)
            }
        }
    }

    /// Sends a watcher its next changes while its queued output is under the send limit; the rest waits
    /// for its peer to read (the host drains again once the socket takes bytes).
    func drain(_ connection: Connection, settling: Bool = true) {
        guard let stream = connection.watch, !connection.isClosed else { return }
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
            guard host.send(connection) else { return }
            if !more { break }
        }
        if sent && settling { host.settle(connection, now: CachetClock.now()) }
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
    func process(_ connection: Connection, now: UInt32) {
        while let stream = connection.watch {
            let region = connection.input.wholeRegion
            let frame: CachetFrame?
            do {
                frame = try CachetFrameDecoder.decodeFrame(
                    in: region,
                    at: connection.input.readIndex,
                    maximumPayloadLength: maximumPayloadLength
                )
            } catch {
                appendError(error, opcode: .none, id: 0, to: &connection.output)
                connection.input.moveReadIndex(to: connection.input.writeIndex)
                host.beginClosing(connection)
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
                hub.unregister(stream)
                connection.watch = nil
                appendReply(opcode: .unwatch, status: .ok, id: header.id, to: &connection.output)
                connection.phase = .reading(frameLength: 0)
                // The requests after it are served as on any connection.
                host.process(connection, now: now)
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
        _ = host.send(connection)
    }
}
