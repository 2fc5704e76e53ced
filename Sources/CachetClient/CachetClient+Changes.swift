public import CachetWire

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
        let nodes = topology.nodes
        let transport = transport
        let coder = coder
        let shutDown = isShutDownNow
        return AsyncThrowingStream { continuation in
            guard !shutDown else {
                continuation.finish(throwing: NodeWatch.shutdownError)
                return
            }
            // Each node's watch lives on the client's event loop: its connections are channels of the loop,
            // its backoff the loop's timers.
            let watches = nodes.map {
                NodeWatch(node: $0, request: request, transport: transport, coder: coder, continuation: continuation)
            }
            continuation.onTermination = { _ in
                transport.loop.execute { for watch in watches { watch.stop() } }
            }
            // Names are resolved here, on the caller's thread, and kept by each node: the loop then finds
            // them resolved and does not wait for a name server.
            for node in nodes { _ = try? node.address() }
            transport.startIfNeeded()
            transport.loop.execute { for watch in watches { watch.start() } }
        }
    }
}
