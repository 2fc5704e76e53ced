import CachetIO
import CachetLocking
public import CachetWire
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One change of a watched key, from the member that owns it (`Protocol/PROTOCOL.md`, "WATCH").
public struct CachetChange: Sendable {
    /// What changed: `put`, `delete`, `expired`, `evicted`, `clear` (every key under ``key`` is gone), or
    /// `gap` (changes were missed: reload what you hold from this member's keys).
    public var kind: CachetEventKind
    /// The key (for `clear`, the prefix cleared; for `gap`, empty).
    public var key: [UInt8]
    /// The member that reported it (its id in the client's configuration).
    public var node: String
    /// Where it stands in that member's stream.
    public var position: CachetWatchPosition
    /// For `put`: the seconds the entry had to live (0: no TTL).
    public var ttl: UInt32
    /// For `put`, when values were asked for and the value was short enough: its bytes.
    public var rawValue: [UInt8]?
    /// Whether the value was left out for its length.
    public var valueOmitted: Bool
    let coder: any CachetCoder

    /// The key as UTF-8 text.
    public var keyString: String { String(decoding: key, as: UTF8.self) }

    /// The value decoded as `type` with the client's coder; nil when the event carries none.
    /// - Throws: ``CachetClientError`` `decodingFailed` naming the key and the type.
    public func value<Value: Decodable>(as type: Value.Type) throws(CachetClientError) -> Value? {
        guard let rawValue else { return nil }
        do {
            return try coder.decode(type, from: rawValue)
        } catch {
            throw CachetClientError(
                code: .decodingFailed,
                message: "the value of '\(keyString)' in a \(kind) event does not decode as \(Value.self): \(error)",
                node: node,
                underlying: error
            )
        }
    }
}

extension CachetClient {
    /// The changes of keys under `prefix` on every node, merged, as they happen, until the task that
    /// iterates stops (or the client shuts down).
    ///
    /// ```swift
    /// for try await change in client.changes(prefix: "user:", values: true) {
    ///     // change.key, change.kind, change.position, try change.value(as: User.self)
    /// }
    /// ```
    ///
    /// Each node is watched over a connection of its own. One that drops is opened again and resumes
    /// after the last change it delivered; when the node no longer has what came after it (its buffer moved
    /// on, or it restarted), a `gap` change from that node comes first: reload what you hold of its keys.
    /// Changes of one node come in order; those of different nodes interleave as they arrive. The nodes are
    /// those of the topology when the call is made.
    /// - Parameters:
    ///   - prefix: the key prefix, empty for every key.
    ///   - values: whether `put` changes carry the value.
    ///   - maximumValueLength: values longer than this are left out (``CachetChange/valueOmitted``).
    /// - Returns: the merged changes; it ends only with an error when the client shuts down.
    public func changes(
        prefix: String = "",
        values: Bool = false,
        maximumValueLength: Int = 64 << 10
    ) -> AsyncThrowingStream<CachetChange, any Error> {
        let request = CachetWatchRequest(
            prefix: Array(prefix.utf8),
            includesValues: values,
            maximumValueLength: UInt32(clamping: maximumValueLength)
        )
        let nodes = topology.members
        let configuration = configuration
        let coder = coder
        let logger = logger
        return AsyncThrowingStream { continuation in
            let stopped = WatchStop()
            for node in nodes {
                let reader = WatchReader(
                    node: node,
                    request: request,
                    configuration: configuration,
                    coder: coder,
                    stopped: stopped,
                    continuation: continuation
                )
                DispatchQueue(label: "cachet.client.watch.\(node.id)", qos: .utility).async {
                    reader.run()
                    logger.debug("watch of a node ended", metadata: ["cachet.node": "\(node.id)"])
                }
            }
            continuation.onTermination = { _ in stopped.stop() }
        }
    }
}

/// Tells a stream's readers to stop.
final class WatchStop: Sendable {
    private let flag = Atomic(false)
    func stop() { flag.store(true, ordering: .releasing) }
    var isStopped: Bool { flag.load(ordering: .acquiring) }
}

/// Watches one node over a blocking connection of its own, on a queue of its own: connects (TLS and AUTH
/// as configured), sends WATCH (resuming after the last change it delivered), yields each EVENT, and
/// connects again after a failure, with a backoff of 100 ms doubling to 2 s.
final class WatchReader: Sendable {
    let node: CachetClient.Node
    let request: CachetWatchRequest
    let configuration: CachetClient.Configuration
    let coder: any CachetCoder
    let stopped: WatchStop
    let continuation: AsyncThrowingStream<CachetChange, any Error>.Continuation

    init(
        node: CachetClient.Node,
        request: CachetWatchRequest,
        configuration: CachetClient.Configuration,
        coder: any CachetCoder,
        stopped: WatchStop,
        continuation: AsyncThrowingStream<CachetChange, any Error>.Continuation
    ) {
        self.node = node
        self.request = request
        self.configuration = configuration
        self.coder = coder
        self.stopped = stopped
        self.continuation = continuation
    }

    func run() {
        var position: CachetWatchPosition?
        var backoff: Duration = .milliseconds(100)
        while !stopped.isStopped {
            do throws(CachetIOError) {
                try watch(&position) { backoff = .milliseconds(100) }
            } catch {
                // The node is down or restarting: watch it again, resuming after `position`.
            }
            var waited: Duration = .zero
            while waited < backoff && !stopped.isStopped {
                let step = min(.milliseconds(50), backoff - waited)
                let nanoseconds = step.components.seconds * 1_000_000_000 + step.components.attoseconds / 1_000_000_000
                usleep(UInt32(nanoseconds / 1000))
                waited += step
            }
            backoff = min(backoff * 2, .seconds(2))
        }
    }

    /// One connection's watch, until it fails or the stream stops.
    private func watch(_ position: inout CachetWatchPosition?, connected: () -> Void) throws(CachetIOError) {
        let address = CachetAddress(host: node.host, port: node.port)
        let connection: CachetBlockingConnection
        if let tls = configuration.tls {
            connection = try CachetBlockingConnection(
                to: address,
                timeout: configuration.connectTimeout,
                tls: try CachetTLSContext(role: .client, configuration: tls)
            )
        } else {
            connection = try CachetBlockingConnection(to: address, timeout: configuration.connectTimeout)
        }
        defer { connection.close() }
        if let credentials = configuration.credentials {
            try connection.send(
                CachetCommand.auth(user: Array(credentials.user.utf8), secret: Array(credentials.secret.utf8))
                    .encoded(id: 1),
                until: CachetDeadline(after: configuration.requestTimeout)
            )
            let reply = try read(connection, deadline: CachetDeadline(after: configuration.requestTimeout))
            guard reply?.status == .ok else { return }
        }
        var watch = request
        watch.resumingAfter = position
        try connection.send(
            CachetCommand.watch(watch).encoded(id: 2),
            until: CachetDeadline(after: configuration.requestTimeout)
        )
        guard let reply = try read(connection, deadline: CachetDeadline(after: configuration.requestTimeout)),
            reply.opcode == .watch, reply.status == .ok, reply.body.count == 16
        else { return }
        let run = reply.body[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let sequence = reply.body[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        position = CachetWatchPosition(run: run, sequence: sequence)
        connected()
        while !stopped.isStopped {
            // A short deadline, so that a stopped stream is noticed within a second.
            let frame: CachetResponse?
            do throws(CachetIOError) {
                frame = try read(connection, deadline: CachetDeadline(after: .seconds(1)))
            } catch  where error.code == .timedOut {
                continue
            }
            guard let frame else { return }
            guard frame.opcode == .event, let event = try? CachetEvent(decoding: frame.body) else { continue }
            position = CachetWatchPosition(run: run, sequence: event.sequence)
            continuation.yield(
                CachetChange(
                    kind: event.kind,
                    key: event.key,
                    node: node.id,
                    position: CachetWatchPosition(run: run, sequence: event.sequence),
                    ttl: event.ttl,
                    rawValue: event.value,
                    valueOmitted: event.valueOmitted,
                    coder: coder
                )
            )
        }
    }

    /// The next whole frame, or nil when the node closed the connection.
    private func read(_ connection: CachetBlockingConnection, deadline: CachetDeadline) throws(CachetIOError)
        -> CachetResponse?
    {
        while true {
            let region = connection.input.readableRegion
            if let frame = try? CachetReplyDecoder.decodeReply(
                in: region,
                maximumPayloadLength: configuration.maximumFrameLength
            ) {
                let response = CachetResponse(frame: frame, in: region)
                connection.input.moveReadIndex(forwardBy: frame.end)
                return response
            }
            guard try connection.receive(until: deadline) > 0 else { return nil }
        }
    }
}
