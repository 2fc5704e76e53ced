import CachetIO
import CachetLocking
import CachetWire
public import CoreMetrics
public import Logging
import Synchronization
public import Tracing

/// A client of a Cachet cluster: routes every key to its node by the consistent-hash ring
/// (`Protocol/RING.md`) and talks to each node over a small pool of multiplexed connections.
///
/// ```swift
/// let client = try CachetClient(configuration: .init(nodes: [.init(host: "127.0.0.1", port: 7420)]))
/// try await client.put("user:42", value: bytes, ttl: .seconds(60))
/// let value: [UInt8]? = try await client.get("user:42")
/// let removed: Bool = try await client.delete("user:42")
/// ```
///
/// A client is usable right after `init`: connections open when the first request needs them. It is
/// `Sendable`: share one client between any number of tasks; requests of many tasks share each
/// connection, matched by request id, and requests issued together go out in one write. Call
/// ``shutdown()`` when done (or run the client as a swift-service-lifecycle `Service`).
///
/// Every call is bounded by ``Configuration/requestTimeout`` and fails with a ``CachetClientError``;
/// cancelling the calling task fails only that call.
public final class CachetClient: Sendable {
    /// The configuration the client was created with.
    public let configuration: Configuration
    /// The topology in force: read once per call (``topology``).
    private let current: Atomic<Unmanaged<ClientTopology>>
    /// Every topology the client has had, kept alive for its lifetime: a call may still hold one that was
    /// replaced (memberships change rarely, so this stays short).
    let topologies: CachetLock<[ClientTopology]>
    /// The next connection slot's number.
    let nextSlot: CachetLock<Int>
    let transport: ClientTransport
    let logger: Logger
    private let isShutDown = Atomic<Bool>(false)
    private let requestTimeoutNanoseconds: UInt64
    /// What the client reports to the app's metrics backend (swift-metrics).
    let metrics: ClientMetrics
    /// How a call that is the only one in flight waits for its reply.
    let loneCallerSpin: LoneCallerSpin
    /// How typed values become bytes and back.
    public let coder: any CachetCoder
    /// The tracer that gets a span per request; nil when none is bootstrapped (requests then make none).
    let tracer: (any Tracer)?
    /// The loads in flight of ``get(_:as:ttl:loader:)``, by key: concurrent misses of one key share one.
    let loads = CachetLock<[[UInt8]: ReadThroughLoad]>([:])

    /// Creates a client. Nothing is connected yet: the first request to each node opens its connection.
    /// - Parameters:
    ///   - configuration: the nodes and timeouts.
    ///   - logger: where the client logs (node up and down, at `info`; probes at `debug`). Logs nothing
    ///     by default.
    ///   - metricsFactory: where the client reports its requests and its nodes' states (swift-metrics,
    ///     see ``ClientMetrics``); by default the backend the app bootstrapped, if any.
    ///   - coder: how typed values become bytes and back (``put(_:value:ttl:)-(_,Value,_)``,
    ///     ``get(_:as:)-(_,Value.Type)``); JSON by default.
    ///   - tracer: where the client reports a span per request (swift-distributed-tracing, see
    ///     <doc:UsingCachetClient>); by default the tracer the app bootstrapped, if any. Without one,
    ///     requests make no span and cost nothing more.
    /// - Throws: ``CachetClientError`` with code `invalidConfiguration` for an unusable configuration.
    public init(
        configuration: Configuration,
        logger: Logger = Logger(label: "cachet.client", factory: { _ in SwiftLogNoOpLogHandler() }),
        metricsFactory: any MetricsFactory = MetricsSystem.factory,
        coder: any CachetCoder = CachetJSONCoder(),
        tracer: any Tracer = InstrumentationSystem.tracer
    ) throws(CachetClientError) {
        try configuration.validate()
        self.configuration = configuration
        self.coder = coder
        self.tracer = tracer is NoOpTracer ? nil : tracer
        self.logger = logger
        // The timer's period bounds how late a timeout fires: a fiftieth of the shortest timeout,
        // between 1 and 10 ms.
        let shortest = min(configuration.requestTimeout, configuration.connectTimeout)
        let tick = max(.milliseconds(1), min(.milliseconds(10), shortest / 50))
        var tls: CachetTLSContext?
        if let configuration = configuration.tls {
            do throws(CachetIOError) {
                tls = try CachetTLSContext(role: .client, configuration: configuration)
            } catch {
                throw CachetClientError(
                    code: .invalidConfiguration,
                    message: "tls: \(error.message)",
                    underlying: error
                )
            }
        }
        transport = try ClientTransport(
            label: "cachet.client",
            tick: tick,
            linger: configuration.eventLoopLinger,
            tls: tls,
            credentials: configuration.credentials
        )
        let metrics = ClientMetrics(factory: metricsFactory)
        self.metrics = metrics
        var nodes: [NodeClient] = []
        for (index, node) in configuration.nodes.enumerated() {
            nodes.append(
                NodeClient(
                    node: node,
                    configuration: configuration,
                    transport: transport,
                    firstSlot: index * configuration.connectionsPerNode,
                    logger: logger,
                    metrics: metrics
                )
            )
        }
        let topology = try ClientTopology(
            members: configuration.nodes,
            nodes: nodes,
            virtualNodesPerMember: configuration.virtualNodesPerMember
        )
        current = Atomic(Unmanaged.passUnretained(topology))
        topologies = CachetLock([topology])
        nextSlot = CachetLock(nodes.count * configuration.connectionsPerNode)
        transport.install(nodes: nodes)
        requestTimeoutNanoseconds = configuration.requestTimeout.nanoseconds
        loneCallerSpin = LoneCallerSpin(maximumSpin: configuration.maximumSpin)
        followMembership()
    }

    /// The topology in force: the nodes and the ring. A call reads it once and keeps to it.
    var topology: ClientTopology { current.load(ordering: .acquiring).takeUnretainedValue() }

    /// Puts `topology` in force (it is kept alive for the client's lifetime).
    func install(_ topology: ClientTopology) {
        topologies.withLock { $0.append(topology) }
        current.store(Unmanaged.passUnretained(topology), ordering: .releasing)
    }

    /// The nodes in force.
    var nodes: [NodeClient] { topology.nodes }

    deinit {
        // No call is in flight (each holds the client), so only idle connections remain: stopping the loop
        // closes them (after shutdown(), it only waits for the loop's last queued work).
        transport.close()
    }

    // MARK: Single keys

    /// Stores `value` under `key`, replacing any earlier value.
    /// - Parameters:
    ///   - key: 1 to 4096 bytes of UTF-8.
    ///   - value: the bytes to store.
    ///   - ttl: how long the entry lives; nil for no expiry. Rounded up to whole seconds.
    /// - Throws: ``CachetClientError``: `badRequest` or `tooLarge` for a bad key or value (before
    ///   anything is sent), `tooLarge` when the node cannot fit the entry, `timeout`, `unavailable`,
    ///   `connectionFailed`, `cancelled`, `shutdown`.
    public func put(_ key: String, value: [UInt8], ttl: Duration? = nil) async throws(CachetClientError) {
        try await put(key: key.utf8, value: value, ttl: ttl)
    }

    /// Stores `value` under the key of bytes `key`. See ``put(_:value:ttl:)-(String,_,_)``.
    public func put(_ key: [UInt8], value: [UInt8], ttl: Duration? = nil) async throws(CachetClientError) {
        try await put(key: key, value: value, ttl: ttl)
    }

    /// Stores the UTF-8 of `value` under `key`. See ``put(_:value:ttl:)-(String,_,_)``.
    public func put(_ key: String, value: String, ttl: Duration? = nil) async throws(CachetClientError) {
        try await put(key: key.utf8, value: value.utf8, ttl: ttl)
    }

    /// The value stored under `key`.
    /// - Parameter key: 1 to 4096 bytes of UTF-8.
    /// - Returns: the value, or nil when the key is not stored (or has expired).
    /// - Throws: ``CachetClientError`` (see ``put(_:value:ttl:)-(String,_,_)``).
    public func get(_ key: String) async throws(CachetClientError) -> [UInt8]? {
        try await get(key: key.utf8)
    }

    /// The value stored under the key of bytes `key`, or nil.
    public func get(_ key: [UInt8]) async throws(CachetClientError) -> [UInt8]? {
        try await get(key: key)
    }

    /// The value stored under `key` read as UTF-8 (invalid bytes replaced), or nil.
    public func getString(_ key: String) async throws(CachetClientError) -> String? {
        guard let bytes = try await get(key: key.utf8) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Removes `key`.
    /// - Returns: whether a live entry was removed.
    /// - Throws: ``CachetClientError`` (see ``put(_:value:ttl:)-(String,_,_)``).
    @discardableResult
    public func delete(_ key: String) async throws(CachetClientError) -> Bool {
        try await delete(key: key.utf8)
    }

    /// Removes the key of bytes `key`; returns whether a live entry was removed.
    @discardableResult
    public func delete(_ key: [UInt8]) async throws(CachetClientError) -> Bool {
        try await delete(key: key)
    }

    /// The node that owns `key` on the ring, whatever its health.
    /// - Complexity: O(k + log p) for a key of k bytes and p ring points.
    public func owner(of key: String) -> Node {
        let topology = topology
        return topology.members[withBytes(key.utf8) { topology.router.owner(of: $0) }]
    }

    /// The node that owns the key of bytes `key` on the ring, whatever its health.
    public func owner(of key: [UInt8]) -> Node {
        let topology = topology
        return topology.members[key.withUnsafeBytes { topology.router.owner(of: $0) }]
    }

    /// Whether the client currently routes requests to the node with id `node` (false while it is
    /// marked down, and for an id it does not know).
    public func isUp(node: String) -> Bool {
        nodes.first { $0.id == node }?.isUp ?? false
    }

    // MARK: Shutdown

    /// Shuts the client down: new calls fail with `shutdown`; requests in flight are answered (or time
    /// out); then every connection closes. Calling it again does nothing.
    public func shutdown() async {
        guard !isShutDown.exchange(true, ordering: .relaxed) else { return }
        // Every node the client has had: those of replaced topologies may still have requests in flight.
        let everyNode = self.transport.loop.executeAndWait { self.transport.nodes }
        let slots = everyNode.flatMap(\.slots)
        for node in everyNode { node.shuttingDown.store(true, ordering: .relaxed) }
        for slot in slots where slot.drain() {
            slot.closeCurrent(failure: everyNode[0].shutdownError())
        }
        transport.armTick()
        // In-flight requests end within their timeout; the loop closes each slot's socket after its last.
        let deadline = monotonicNanoseconds() &+ requestTimeoutNanoseconds &+ 100_000_000
        while monotonicNanoseconds() < deadline, !slots.allSatisfy(\.isShutDown) {
            try? await Task.sleep(for: .milliseconds(1))
        }
        let transport = self.transport
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            transport.loop.execute {
                transport.close()
                continuation.resume()
            }
        }
    }

    // MARK: Internals

    var isShutDownNow: Bool { isShutDown.load(ordering: .relaxed) }

    func put(
        key: some Collection<UInt8>,
        value: some Collection<UInt8>,
        ttl: Duration?
    ) async throws(CachetClientError) {
        try await put(key: key, value: value, ttl: ttl, lease: .none)
    }

    /// A PUT, with a lease token or without; with one, NOT_STORED is thrown as `leaseLost`... (see
    /// ``CachetClient/get(_:as:ttl:loader:)``).
    func put(
        key: some Collection<UInt8>,
        value: some Collection<UInt8>,
        ttl: Duration?,
        lease: ClientLease
    ) async throws(CachetClientError) {
        let seconds = try ClientRequest.ttlSeconds(ttl)
        let maximum = configuration.maximumFrameLength
        try withBytes(key) { (key) throws(CachetClientError) in
            try ClientRequest.validatePut(key: key, valueCount: value.count, maximumFrameLength: maximum)
        }
        let (status, body, node) = try await execute(key: key, value: value, opcode: .put, ttl: seconds, lease: lease)
        guard status == .ok else { throw statusError(status, body: body, opcode: .put, node: node) }
    }

    func get(key: some Collection<UInt8>) async throws(CachetClientError) -> [UInt8]? {
        try withBytes(key) { (key) throws(CachetClientError) in try ClientRequest.validate(key: key) }
        let (status, body, node) = try await execute(key: key, value: EmptyCollection(), opcode: .get, ttl: 0)
        if status == .ok { return body }
        if status == .notFound { return nil }
        throw statusError(status, body: body, opcode: .get, node: node)
    }

    func delete(key: some Collection<UInt8>) async throws(CachetClientError) -> Bool {
        try withBytes(key) { (key) throws(CachetClientError) in try ClientRequest.validate(key: key) }
        let (status, body, node) = try await execute(key: key, value: EmptyCollection(), opcode: .delete, ttl: 0)
        if status == .ok { return true }
        if status == .notFound { return false }
        throw statusError(status, body: body, opcode: .delete, node: node)
    }

    /// Sends one keyed request (``send(key:value:opcode:ttl:started:)``) and reports it to the app's
    /// metrics backend (``ClientMetrics``): its outcome and how long it took.
    func execute(
        key: some Collection<UInt8>,
        value: some Collection<UInt8>,
        opcode: CachetOpcode,
        ttl: UInt32,
        lease: ClientLease = .none
    ) async throws(CachetClientError) -> (CachetStatus, [UInt8], String) {
        if let tracer {
            return try await traced(tracer, key: key, value: value, opcode: opcode, ttl: ttl, lease: lease)
        }
        var attempts = 0
        return try await measured(key: key, value: value, opcode: opcode, ttl: ttl, lease: lease, attempts: &attempts)
    }

    /// ``execute(key:value:opcode:ttl:lease:)`` with the client's metrics recorded; `attempts` counts the
    /// nodes tried.
    func measured(
        key: some Collection<UInt8>,
        value: some Collection<UInt8>,
        opcode: CachetOpcode,
        ttl: UInt32,
        lease: ClientLease,
        attempts: inout Int
    ) async throws(CachetClientError) -> (CachetStatus, [UInt8], String) {
        let started = monotonicNanoseconds()
        do {
            let result = try await send(
                key: key,
                value: value,
                opcode: opcode,
                ttl: ttl,
                lease: lease,
                started: started,
                attempts: &attempts
            )
            let outcome =
                ClientMetrics.outcome(of: result.0)
                ?? ClientMetrics.outcome(of: statusError(result.0, body: result.1, opcode: opcode))
            metrics.record(opcode, outcome: outcome, nanoseconds: monotonicNanoseconds() &- started)
            return result
        } catch {
            metrics.record(
                opcode,
                outcome: ClientMetrics.outcome(of: error),
                nanoseconds: monotonicNanoseconds() &- started
            )
            throw error
        }
    }

    /// Sends one keyed request to the node that serves its key, failing over along the key's
    /// preference list while the deadline allows.
    private func send(
        key: some Collection<UInt8>,
        value: some Collection<UInt8>,
        opcode: CachetOpcode,
        ttl: UInt32,
        lease: ClientLease,
        started: UInt64,
        attempts: inout Int
    ) async throws(CachetClientError) -> (CachetStatus, [UInt8], String) {
        let deadline = started &+ requestTimeoutNanoseconds
        let failover = configuration.failover
        var lastError: CachetClientError?
        while true {
            let topology = topology
            let nodes = topology.nodes
            guard !isShutDown.load(ordering: .relaxed) else { throw nodes[0].shutdownError() }
            let target = withBytes(key) { bytes in
                topology.router.route(bytes, failover: failover) { nodes[$0].isUp }
            }
            // When no node is left, the failure that took the last one down says more than "unavailable".
            guard let target else { throw lastError ?? unavailableError(key: key) }
            let node = nodes[target]
            let outcome = await send(on: node, deadline: deadline) { slot, id, waiter, deadline in
                withBytes(key) { key in
                    withBytes(value) { value in
                        var request =
                            opcode == .put
                            ? ClientRequest.put(key: key, value: value, ttl: ttl)
                            : ClientRequest.keyed(opcode, key: key)
                        // A GET takes a value longer than one frame in several (older nodes ignore the flag).
                        let frames = opcode == .get ? CachetRequestFlags.frames.rawValue : 0
                        switch lease {
                        case .none: request.flags = frames
                        case .ttlGet: request.flags = CachetRequestFlags.ttl.rawValue | frames
                        case .rangeGet:
                            // The range's 16 bytes follow the key.
                            request.flags = CachetRequestFlags.range.rawValue
                            request.value = value
                        case .part: request.flags = CachetRequestFlags.part.rawValue
                        case .get: request.flags = CachetRequestFlags.lease.rawValue | frames
                        case .put(let token):
                            request.flags = CachetRequestFlags.lease.rawValue
                            request.token = token
                        }
                        slot.issue(request, id: id, waiter: waiter, deadline: deadline)
                    }
                }
            }
            attempts += 1
            switch outcome {
            case .reply(let status, let body):
                return (status, body, node.id)
            case .failure(let error):
                lastError = error
                let retryable = error.code == .connectionFailed || error.code == .unavailable
                guard failover, retryable, attempts < 2 * nodes.count + 1, monotonicNanoseconds() < deadline
                else { throw error }
                // Try again: the node is now marked down (and routing picks the key's next node), or it
                // reconnects.
                _ = node
            }
        }
    }

    /// Issues one request on `node` and waits for its outcome; cancellation fails only this request.
    ///
    /// A call that is the client's only one in flight spins for its reply for a short while before it
    /// suspends (``LoneCallerSpin``): a reply that comes meanwhile resumes the continuation before the task
    /// suspends, so the task goes on on its own thread, without the event loop enqueueing it.
    @inline(__always)
    func send(
        on node: NodeClient,
        deadline: UInt64,
        _ issue: (ConnectionSlot, UInt32, ClientWaiter, UInt64) -> Void
    ) async -> ClientOutcome {
        let slot = node.pickSlot()
        let id = slot.reserveID()
        let spin = loneCallerSpin
        let (lone, budget) = spin.begin()
        let began = lone ? monotonicNanoseconds() : 0
        defer { spin.end(lone: lone, began: began) }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<ClientOutcome, Never>) in
                guard budget > 0 else { return issue(slot, id, .caller(continuation), deadline) }
                let failures = slot.failuresMark()
                issue(slot, id, .caller(continuation), deadline)
                // Resuming a continuation before its closure returns is allowed: the task then goes on
                // without suspending.
                LoneCallerSpin.spin(budget: budget) { slot.isAnswered(id: id, failuresMark: failures) }
            }
        } onCancel: {
            slot.abandon(id: id)
        }
    }

    func unavailableError(key: some Collection<UInt8>) -> CachetClientError {
        let topology = topology
        let owner = topology.members[withBytes(key) { topology.router.owner(of: $0) }]
        return CachetClientError(
            code: .unavailable,
            message: configuration.failover
                ? "every node that could serve this key is marked down; they are probed again with backoff"
                : "the key's node is marked down and failover is off; it is probed again with backoff",
            node: owner.id
        )
    }

    func statusError(
        _ status: CachetStatus,
        body: [UInt8],
        opcode: CachetOpcode,
        node: String? = nil
    ) -> CachetClientError {
        let text = String(decoding: body, as: UTF8.self)
        let code: CachetClientError.Code
        switch status {
        case .badRequest, .unknownOpcode, .unsupportedVersion: code = .badRequest
        case .tooLarge: code = .tooLarge
        case .unavailable: code = .unavailable
        case .notAuthenticated: code = .notAuthenticated
        case .forbidden: code = .forbidden
        case .notStored: code = .notStored
        default: code = .serverError
        }
        return CachetClientError(
            code: code,
            message: "the node answered \(opcode) with \(status): \(text)",
            node: node
        )
    }
}

/// Runs `body` over the contiguous bytes of `bytes` (copied once when they are not contiguous).
@inline(__always)
func withBytes<Result, Failure: Error>(
    _ bytes: some Collection<UInt8>,
    _ body: (UnsafeRawBufferPointer) throws(Failure) -> Result
) throws(Failure) -> Result {
    var result: Swift.Result<Result, Failure>?
    _ = bytes.withContiguousStorageIfAvailable { buffer in
        result = Swift.Result { () throws(Failure) in try body(UnsafeRawBufferPointer(buffer)) }
    }
    if let result { return try result.get() }
    let copy = Array(bytes)
    return try copy.withUnsafeBytes { buffer in
        Swift.Result { () throws(Failure) in try body(buffer) }
    }.get()
}
