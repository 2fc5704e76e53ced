import CachetWire

/// What CLEAR removed from one node.
public struct CachetNodeClearResult: Sendable, Hashable {
    /// The node's id.
    public var node: String
    /// Entries removed.
    public var items: UInt64
    /// Bytes of keys and values removed.
    public var bytes: UInt64

    /// Creates a result.
    public init(node: String, items: UInt64, bytes: UInt64) {
        self.node = node
        self.items = items
        self.bytes = bytes
    }
}

/// One node's answer to PING.
public struct CachetNodePing: Sendable, Hashable {
    /// The node's id.
    public var node: String
    /// From sending the PING to resuming with its reply.
    public var roundTrip: Duration

    /// Creates a result.
    public init(node: String, roundTrip: Duration) {
        self.node = node
        self.roundTrip = roundTrip
    }
}

extension CachetClient {
    /// Removes every entry of every node, or only those whose keys start with one of `prefixes`.
    ///
    /// On a node with users, a user limited to key prefixes clears only keys under them: all of them
    /// without `prefixes`, and `forbidden` for a prefix wider than its own (`docs/security.md`).
    /// - Parameter prefixes: key prefixes, each non-empty (at most 64); none for every key.
    /// - Returns: per node, in configuration order, the entries and bytes removed.
    /// - Throws: ``CachetClientError`` naming the first node that failed (the others were cleared);
    ///   `badRequest` for an empty prefix or more than 64.
    public func clear(prefixes: [String] = []) async throws(CachetClientError) -> [CachetNodeClearResult] {
        let encodedPrefixes = prefixes.map { Array($0.utf8) }
        guard encodedPrefixes.count <= CachetBodyDecoder.maximumClearPrefixes,
            encodedPrefixes.allSatisfy({ (1...CachetProtocol.maximumKeyLength).contains($0.count) })
        else {
            throw CachetClientError(
                code: .badRequest,
                message: "CLEAR takes none or 1 to \(CachetBodyDecoder.maximumClearPrefixes) key prefixes, "
                    + "each 1 to \(CachetProtocol.maximumKeyLength) bytes"
            )
        }
        var body = CachetCommand.clearPrefixes(encodedPrefixes).encoded(id: 0)
        body.removeFirst(CachetProtocol.frameOverhead)
        let replies = try await everyNode(.clear, body: body)
        var results: [CachetNodeClearResult] = []
        for (node, body) in replies {
            do {
                let counts = try CachetClearResult(decoding: body)
                results.append(CachetNodeClearResult(node: node.id, items: counts.items, bytes: counts.bytes))
            } catch {
                throw CachetClientError(
                    code: .protocolViolation,
                    message: "the CLEAR reply is malformed: \(error.message)",
                    node: node.id,
                    underlying: error
                )
            }
        }
        return results
    }

    /// Every node's counters.
    /// - Returns: per node, in configuration order, its STATS (see `Protocol/PROTOCOL.md`, "STATS").
    /// - Throws: ``CachetClientError`` naming the first node that failed.
    public func stats() async throws(CachetClientError) -> [CachetNodeStats] {
        var results: [CachetNodeStats] = []
        for (node, body) in try await everyNode(.stats) {
            guard let stats = CachetNodeStats(node: node.id, json: body) else {
                throw CachetClientError(
                    code: .protocolViolation,
                    message: "the STATS reply is not a JSON object",
                    node: node.id
                )
            }
            results.append(stats)
        }
        return results
    }

    /// Checks that every node answers.
    /// - Returns: per node, in configuration order, the round trip of a PING.
    /// - Throws: ``CachetClientError`` naming the first node that failed.
    public func ping() async throws(CachetClientError) -> [CachetNodePing] {
        let start = ContinuousClock.now
        var results: [CachetNodePing] = []
        for (node, _, end) in try await everyNodeTimed(.ping) {
            results.append(CachetNodePing(node: node.id, roundTrip: end - start))
        }
        return results
    }

    /// Sends a bare request to every node at once, each with the request timeout (whatever its health:
    /// a node marked down is tried too).
    private func everyNode(
        _ opcode: CachetOpcode,
        body: [UInt8] = []
    ) async throws(CachetClientError) -> [(CachetClient.Node, [UInt8])] {
        try await everyNodeTimed(opcode, body: body).map { ($0.0, $0.1) }
    }

    private func everyNodeTimed(
        _ opcode: CachetOpcode,
        body: [UInt8] = []
    ) async throws(CachetClientError) -> [(CachetClient.Node, [UInt8], ContinuousClock.Instant)] {
        let deadline = monotonicNanoseconds() &+ configuration.requestTimeout.nanoseconds
        let topology = topology
        let nodes = topology.nodes
        // Counted as one call in flight, so that none of its requests spins as a lone caller's would.
        let outcomes = await loneCallerSpin.counting {
            await withTaskGroup(of: (Int, ClientOutcome, ContinuousClock.Instant).self) { group in
                for (index, node) in nodes.enumerated() {
                    group.addTask {
                        guard !self.isShutDownNow else { return (index, .failure(node.shutdownError()), .now) }
                        let outcome = await self.send(on: node, deadline: deadline) { slot, id, waiter, deadline in
                            body.withUnsafeBytes { body in
                                slot.issue(.withBody(opcode, body: body), id: id, waiter: waiter, deadline: deadline)
                            }
                        }
                        return (index, outcome, .now)
                    }
                }
                var outcomes = [(ClientOutcome, ContinuousClock.Instant)?](repeating: nil, count: nodes.count)
                for await (index, outcome, time) in group { outcomes[index] = (outcome, time) }
                return outcomes
            }
        }
        var results: [(CachetClient.Node, [UInt8], ContinuousClock.Instant)] = []
        for (index, entry) in outcomes.enumerated() {
            let node = topology.members[index]
            switch entry?.0 {
            case .reply(let status, let body)?:
                guard status == .ok else { throw statusError(status, body: body, opcode: opcode, node: node.id) }
                results.append((node, body, entry!.1))
            case .failure(let error)?:
                throw error
            case nil:
                throw CachetClientError(code: .cancelled, message: "the calling task was cancelled", node: node.id)
            }
        }
        return results
    }
}
