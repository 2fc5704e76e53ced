import CachetLocking
import CachetWire

extension CachetClient {
    /// The values of many keys at once: the keys of each node go out together (one write per
    /// connection), and all nodes are asked at the same time.
    /// - Parameter keys: the keys, each 1 to 4096 bytes of UTF-8.
    /// - Returns: the values in the order of `keys`; nil for a key that is not stored.
    /// - Throws: ``CachetClientError``: the first key's failure (after failover); `badRequest` or
    ///   `tooLarge` for a bad key, before anything is sent.
    public func get(_ keys: [String]) async throws(CachetClientError) -> [[UInt8]?] {
        try await getMany(keys.map { Array($0.utf8) })
    }

    /// The values of many keys of bytes at once; see ``get(_:)-([String])``.
    public func get(_ keys: [[UInt8]]) async throws(CachetClientError) -> [[UInt8]?] {
        try await getMany(keys)
    }

    /// Stores many entries at once: the entries of each node go out together, all nodes at the same time.
    /// - Parameters:
    ///   - entries: keys and values; a key given twice keeps one of its values.
    ///   - ttl: how long every entry lives; nil for no expiry.
    /// - Throws: ``CachetClientError``: the first entry's failure (after failover; the other entries
    ///   are stored); `badRequest` or `tooLarge` for a bad key or value, before anything is sent.
    public func put(_ entries: [String: [UInt8]], ttl: Duration? = nil) async throws(CachetClientError) {
        try await putMany(entries.map { (Array($0.key.utf8), $0.value) }, ttl: ttl)
    }

    /// Stores many entries with keys of bytes at once; see ``put(_:ttl:)-([String:[UInt8]],_)``.
    public func put(_ entries: [(key: [UInt8], value: [UInt8])], ttl: Duration? = nil) async throws(CachetClientError) {
        try await putMany(entries.map { ($0.key, $0.value) }, ttl: ttl)
    }

    private func getMany(_ keys: [[UInt8]]) async throws(CachetClientError) -> [[UInt8]?] {
        for key in keys {
            try withBytes(key) { (key) throws(CachetClientError) in try ClientRequest.validate(key: key) }
        }
        let outcomes = await batch(keys: keys, values: nil, ttl: 0)
        var values: [[UInt8]?] = []
        values.reserveCapacity(keys.count)
        for (index, outcome) in outcomes.enumerated() {
            var outcome = outcome
            if case .failure(let error) = outcome, retryable(error) {
                do {
                    values.append(try await get(keys[index]))
                    continue
                } catch {
                    outcome = .failure(error)
                }
            }
            switch outcome {
            case .reply(let status, let body):
                if status == .ok {
                    values.append(body)
                } else if status == .notFound {
                    values.append(nil)
                } else {
                    throw statusError(status, body: body, opcode: .get, node: owner(of: keys[index]).id)
                }
            case .failure(let error):
                throw error
            }
        }
        return values
    }

    private func putMany(_ entries: [([UInt8], [UInt8])], ttl: Duration?) async throws(CachetClientError) {
        let seconds = try ClientRequest.ttlSeconds(ttl)
        for (key, value) in entries {
            try withBytes(key) { (key) throws(CachetClientError) in
                try ClientRequest.validatePut(
                    key: key,
                    valueCount: value.count,
                    maximumFrameLength: configuration.maximumFrameLength
                )
            }
        }
        let outcomes = await batch(keys: entries.map(\.0), values: entries.map(\.1), ttl: seconds)
        var firstError: CachetClientError?
        for (index, outcome) in outcomes.enumerated() {
            var outcome = outcome
            if case .failure(let error) = outcome, retryable(error) {
                do {
                    try await put(entries[index].0, value: entries[index].1, ttl: ttl)
                    continue
                } catch {
                    outcome = .failure(error)
                }
            }
            switch outcome {
            case .reply(let status, let body):
                if status != .ok, firstError == nil {
                    firstError = statusError(status, body: body, opcode: .put, node: owner(of: entries[index].0).id)
                }
            case .failure(let error):
                if firstError == nil { firstError = error }
            }
        }
        if let firstError { throw firstError }
    }

    private func retryable(_ error: CachetClientError) -> Bool {
        configuration.failover && (error.code == .connectionFailed || error.code == .unavailable)
    }

    /// Issues one request per key (GET, or PUT when `values` is given), grouped by node, and waits for all.
    private func batch(keys: [[UInt8]], values: [[UInt8]]?, ttl: UInt32) async -> [ClientOutcome] {
        // Counted as a call in flight, so that a single-key call beside it does not spin for its reply.
        await loneCallerSpin.counting { await batchUncounted(keys: keys, values: values, ttl: ttl) }
    }

    private func batchUncounted(keys: [[UInt8]], values: [[UInt8]]?, ttl: UInt32) async -> [ClientOutcome] {
        guard !keys.isEmpty else { return [] }
        let topology = topology
        let nodes = topology.nodes
        guard !isShutDownNow else { return keys.map { _ in .failure(nodes[0].shutdownError()) } }
        let deadline = monotonicNanoseconds() &+ configuration.requestTimeout.nanoseconds
        // Route every key first: the keys of each node, by index.
        var groups = [[Int]](repeating: [], count: nodes.count)
        let collector = BatchCollector(count: keys.count)
        for (index, key) in keys.enumerated() {
            let target = key.withUnsafeBytes { bytes in
                topology.router.route(bytes, failover: configuration.failover) { nodes[$0].isUp }
            }
            if let target {
                groups[target].append(index)
            } else {
                collector.complete(index, .failure(unavailableError(key: key)))
            }
        }
        await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                collector.setContinuation(continuation)
                if Task.isCancelled { collector.cancelAll() }
                for (nodeIndex, indices) in groups.enumerated() where !indices.isEmpty {
                    let slot = nodes[nodeIndex].pickSlot()
                    slot.issueBatch(count: indices.count, deadline: deadline) { position, encode in
                        let index = indices[position]
                        let id = slot.reserveID()
                        collector.issued(slot: slot, id: id)
                        keys[index].withUnsafeBytes { key in
                            if let values {
                                values[index].withUnsafeBytes { value in
                                    encode(.put(key: key, value: value, ttl: ttl), id, .batch(collector, index))
                                }
                            } else {
                                encode(.keyed(.get, key: key), id, .batch(collector, index))
                            }
                        }
                    }
                }
            }
        } onCancel: {
            collector.cancelAll()
        }
        return collector.outcomes()
    }
}

/// Gathers the outcomes of a batch's requests and resumes the caller when the last one is in.
final class BatchCollector: Sendable {
    private struct State {
        var outcomes: [ClientOutcome?]
        var remaining: Int
        var continuation: UnsafeContinuation<Void, Never>?
        var issued: [(ConnectionSlot, UInt32)] = []
        var cancelled = false
    }
    private let state: CachetLock<State>

    init(count: Int) {
        state = CachetLock(State(outcomes: Array(repeating: nil, count: count), remaining: count))
    }

    func setContinuation(_ continuation: UnsafeContinuation<Void, Never>) {
        let done = state.withLock { state -> Bool in
            if state.remaining == 0 { return true }
            state.continuation = continuation
            return false
        }
        if done { continuation.resume() }
    }

    func complete(_ index: Int, _ outcome: ClientOutcome) {
        let continuation = state.withLock { state -> UnsafeContinuation<Void, Never>? in
            guard state.outcomes[index] == nil else { return nil }
            state.outcomes[index] = outcome
            state.remaining -= 1
            guard state.remaining == 0 else { return nil }
            defer { state.continuation = nil }
            return state.continuation
        }
        continuation?.resume()
    }

    func issued(slot: ConnectionSlot, id: UInt32) {
        let cancelled = state.withLock { state -> Bool in
            state.issued.append((slot, id))
            return state.cancelled
        }
        if cancelled { slot.abandon(id: id) }
    }

    func cancelAll() {
        let issued = state.withLock { state -> [(ConnectionSlot, UInt32)] in
            state.cancelled = true
            return state.issued
        }
        for (slot, id) in issued { slot.abandon(id: id) }
    }

    func outcomes() -> [ClientOutcome] {
        state.withLock { state in
            state.outcomes.map {
                $0 ?? .failure(CachetClientError(code: .cancelled, message: "the calling task was cancelled"))
            }
        }
    }
}
