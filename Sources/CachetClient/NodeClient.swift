import CachetCluster
import CachetIO
import CachetLocking
import CachetWire
import Logging
import Synchronization

/// One node as the client sees it (configured, or learnt from the cluster's membership): its pool of connection slots, its health, its address.
final class NodeClient: @unchecked Sendable {
    // `slots` is written once in `init` and only read afterwards; `health` and `cachedAddress` are
    // guarded by their mutexes; the atomics are read without locks on the request path.
    let node: CachetClient.Node
    let connectTimeout: Duration
    let requestTimeout: Duration
    let connectTimeoutNanoseconds: UInt64
    let requestTimeoutNanoseconds: UInt64
    let maximumFrameLength: Int
    let logger: Logger
    /// Where node state changes are reported (swift-metrics).
    let metrics: ClientMetrics
    private(set) var slots: [ConnectionSlot] = []
    /// The node's health by the same rules a node applies to its peers (`Protocol/CLUSTER.md`, "Health").
    private let health: CachetLock<CachetPeerHealth>
    /// Mirrors `health.isRoutable` for routing without a lock.
    private let up = Atomic<Bool>(true)
    /// True while the node is up with no timeout counted: a reply then needs no health update.
    private let clean = Atomic<Bool>(true)
    private let roundRobin = Atomic<Int>(0)
    private let cachedAddress = CachetLock<CachetSocketAddress?>(nil)
    private let random = CachetLock(SystemRandomNumberGenerator())
    /// Set when the client shuts down.
    let shuttingDown = Atomic<Bool>(false)

    init(
        node: CachetClient.Node,
        configuration: CachetClient.Configuration,
        transport: ClientTransport,
        firstSlot: Int,
        logger: Logger,
        metrics: ClientMetrics
    ) {
        self.node = node
        self.metrics = metrics
        connectTimeout = configuration.connectTimeout
        requestTimeout = configuration.requestTimeout
        connectTimeoutNanoseconds = configuration.connectTimeout.nanoseconds
        requestTimeoutNanoseconds = configuration.requestTimeout.nanoseconds
        maximumFrameLength = configuration.maximumFrameLength
        let maximumBackoff = configuration.probeMaximumBackoff.nanoseconds
        health = CachetLock(
            CachetPeerHealth(
                configuration: .init(
                    timeoutsBeforeDown: configuration.timeoutsBeforeDown,
                    initialBackoff: configuration.probeInitialBackoff.nanoseconds,
                    maximumBackoff: maximumBackoff,
                    // A node that comes back keeps its backoff until it has answered for twice the longest
                    // wait: a flapping node is probed, and trusted again, more and more rarely.
                    holdPeriod: maximumBackoff.multipliedReportingOverflow(by: 2).partialValue
                )
            )
        )
        var logger = logger
        logger[metadataKey: "cachet.node"] = "\(node.id)"
        self.logger = logger
        slots = (0..<configuration.connectionsPerNode).map {
            ConnectionSlot(node: self, transport: transport, index: firstSlot + $0)
        }
        metrics.nodeState(node.id, up: true)
    }

    /// The node's ring id.
    var id: String { node.id }

    /// Whether requests may be routed here.
    @inline(__always)
    var isUp: Bool { up.load(ordering: .relaxed) }

    /// The next slot of the pool, in turn.
    @inline(__always)
    func pickSlot() -> ConnectionSlot {
        if slots.count == 1 { return slots[0] }
        let turn = roundRobin.wrappingAdd(1, ordering: .relaxed).oldValue
        return slots[Int(UInt(bitPattern: turn) % UInt(slots.count))]
    }

    /// The node's address, resolved once (the first the system lists).
    func address() throws(CachetIOError) -> CachetSocketAddress {
        if let address = cachedAddress.withLock({ $0 }) { return address }
        let resolved = try CachetAddress(host: node.host, port: node.port).resolve()
        guard let address = resolved.first else {
            throw CachetIOError(code: .resolutionFailed, message: "\(node.host) resolves to no address")
        }
        cachedAddress.withLock { $0 = address }
        return address
    }

    /// The failure of a call on a node that left the cluster's membership: a connection failure, which the
    /// client retries with the key's owner among the members in force.
    func leftError() -> CachetClientError {
        CachetClientError(
            code: .connectionFailed,
            message: "the node left the cluster's membership; the call goes to the key's owner among the members",
            node: node.id
        )
    }

    func shutdownError() -> CachetClientError {
        CachetClientError(
            code: .shutdown,
            message: "the client was shut down: make no calls after shutdown()",
            node: node.id
        )
    }

    // MARK: Health events

    /// A reply arrived.
    @inline(__always)
    func replied() {
        if clean.load(ordering: .relaxed) { return }
        let now = monotonicNanoseconds()
        let transition = health.withLock { $0.replied(now: now) }
        clean.store(true, ordering: .relaxed)
        if transition == .cameUp {
            up.store(true, ordering: .relaxed)
            logger.info("cachet node is up again")
            metrics.nodeState(node.id, up: true)
        }
    }

    /// `count` requests timed out (on the loop).
    func timedOut(count: Int) {
        guard !shuttingDown.load(ordering: .relaxed) else { return }
        let now = monotonicNanoseconds()
        var wentDown = false
        for _ in 0..<count {
            let transition = random.withLock { random in
                health.withLock { $0.timedOut(now: now, using: &random) }
            }
            clean.store(false, ordering: .relaxed)
            if case .wentDown = transition { wentDown = true }
        }
        if wentDown {
            markedDown(reason: "\(health.withLock { $0.configuration.timeoutsBeforeDown }) requests in a row timed out")
        }
    }

    /// A connection could not be opened.
    func connectFailed() {
        let now = monotonicNanoseconds()
        let transition = random.withLock { random in
            health.withLock { $0.refused(now: now, using: &random) }
        }
        clean.store(false, ordering: .relaxed)
        if case .wentDown = transition { markedDown(reason: "a connection could not be opened") }
    }

    private func markedDown(reason: String) {
        up.store(false, ordering: .relaxed)
        logger.info("cachet node marked down", metadata: ["cachet.reason": "\(reason)"])
        metrics.nodeState(node.id, up: false)
        let failure = CachetClientError(
            code: .unavailable,
            message: "the node was marked down (\(reason)); it is probed again with backoff",
            node: node.id
        )
        for slot in slots { slot.closeCurrent(failure: failure) }
        slots.first?.transport.armTick()
    }

    /// The probe's PING was answered.
    func probeAnswered(status: CachetStatus) {
        if status == .ok {
            replied()
        } else {
            probeFailed()
        }
    }

    /// The probe failed: back off.
    func probeFailed() {
        let now = monotonicNanoseconds()
        // A failed probe of a down node reschedules it, doubling the backoff.
        _ = random.withLock { random in health.withLock { $0.timedOut(now: now, using: &random) } }
    }

    /// A socket of this node closed.
    func slotClosed() {}

    // MARK: Timer (on the loop)

    /// Whether the tick must keep running for this node.
    var needsTimer: Bool {
        if !isUp { return true }
        for slot in slots where slot.needsTimer { return true }
        return false
    }

    /// Times requests out and probes the node if it is down and due.
    func tick(now: UInt64) {
        for slot in slots { _ = slot.expire(now: now) }
        guard !isUp, !shuttingDown.load(ordering: .relaxed) else { return }
        if health.withLock({ $0.startProbeIfDue(now: now) }) {
            logger.debug("probing cachet node")
            let slot = slots[0]
            slot.issue(
                .bare(.ping),
                id: slot.reserveID(),
                waiter: .probe,
                deadline: now &+ requestTimeoutNanoseconds
            )
        }
    }
}
