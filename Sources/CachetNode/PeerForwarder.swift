import CachetCluster
import CachetIO
import CachetWire
import Dispatch
import Logging

/// Forwards requests for keys this node does not own to their owners, for one of the node's event loops:
/// one multiplexed connection per peer (``PeerChannel``), opened on first use and again after it fails,
/// hosted by the node loop's own ``CachetEventLoop``, beside the client connections, so that a forward and
/// its reply are handled where the client's connection is, with no hop and no lock. See `Protocol/CLUSTER.md`,
/// "Forwarding".
///
/// Each forward has a deadline (`--forward-timeout`); at most `maximumInFlightPerPeer` are in flight to
/// one peer, and more are answered UNAVAILABLE at once, so one slow peer cannot hold the requests bound
/// for others. Used only on its loop's queue, but for ``start(probeInterval:)`` and ``stop()``.
///
/// `@unchecked Sendable`: every property but the immutable ones is touched only on the loop's queue
/// (``start(probeInterval:)`` hands the probing to it with `execute`).
final class PeerForwarder: @unchecked Sendable {
    /// Forwards in flight to one peer at most.
    static let maximumInFlightPerPeer = 1024

    let loop: CachetEventLoop
    let timeout: Duration
    /// The node's view of its peers, fed with every outcome here; nil leaves health out.
    let health: NodeHealth?
    private let maximumReplyLength: Int
    private let logger: Logger
    private var channels: [CachetClusterMember: PeerChannel] = [:]
    /// Deletes the local copies of keys whose owner has been told (set by the loop: it has the store).
    var dropLocalCopies: (([[UInt8]]) -> Void)?

    /// - Parameters:
    ///   - loop: the node loop's transport loop, which hosts the peer connections.
    ///   - timeout: each forward's deadline, the connect included.
    ///   - maximumReplyLength: the largest reply payload accepted from a peer.
    ///   - logger: where connection failures are logged.
    init(
        loop: CachetEventLoop,
        timeout: Duration,
        maximumReplyLength: Int,
        health: NodeHealth? = nil,
        logger: Logger
    ) {
        self.loop = loop
        self.timeout = timeout
        self.maximumReplyLength = maximumReplyLength
        self.health = health
        self.logger = logger
    }

    /// With `probeInterval`, starts the PING probes of every peer (routable ones each interval, down ones
    /// when their backoff has passed; at most one probe in flight per peer). Called once, after the loop
    /// has started.
    func start(probeInterval: Duration? = nil) {
        guard let probeInterval, health != nil else { return }
        loop.execute { [self] in scheduleProbes(every: probeInterval) }
    }

    private func scheduleProbes(every interval: Duration) {
        // Checked often enough to honour a down peer's backoff (250 ms at first), at most every interval.
        let tick = min(interval, .milliseconds(100))
        var sinceRoutine = Duration.zero
        var routines = 0
        func run() {
            guard let health else { return }
            sinceRoutine += tick
            let routine = sinceRoutine >= interval
            if routine {
                sinceRoutine = .zero
                routines += 1
                // Every tenth round, compare memberships: a STATS of each routable peer, for its hash.
                if routines % 10 == 1 { compareMemberships(health) }
            }
            for member in health.membersToProbe() {
                let channel = channels[member]
                // Routable peers only on the interval, and not while a probe or forwards are on the way.
                if routine || !health.isRoutable(member) {
                    if let channel, !channel.pending.isEmpty, health.isRoutable(member) { continue }
                    var ping = CachetCommand.ping.encoded(id: 0, flags: .forwarded)
                    forward(&ping, to: member, probe: true) { _ in }
                }
            }
            deliverInvalidations()
            _ = loop.schedule(after: tick) { run() }
        }
        _ = loop.schedule(after: tick) { run() }
    }

    /// Asks every routable peer for its STATS and records whether its membership hash (`cluster_hash`)
    /// differs from this node's: nodes that read different cluster files route keys differently.
    private func compareMemberships(_ health: NodeHealth) {
        // Not `membersToProbe()`: that marks the down peers that are due as probed.
        for member in health.routablePeers() {
            var stats = CachetCommand.stats.encoded(id: 0, flags: .forwarded)
            forward(&stats, to: member) { outcome in
                guard case .answered(.ok, let body) = outcome,
                    let hash = Self.field("cluster_hash", in: body)
                else { return }
                health.recordMembershipHash(hash, of: member, logger: self.logger)
            }
        }
    }

    /// The string value of a top-level field of a STATS JSON object, found by its name.
    static func field(_ name: String, in body: [UInt8]) -> String? {
        let pattern = Array("\"\(name)\":\"".utf8)
        guard body.count > pattern.count else { return nil }
        for start in 0...(body.count - pattern.count) where body[start..<start + pattern.count].elementsEqual(pattern) {
            let value = body[(start + pattern.count)...]
            guard let end = value.firstIndex(of: UInt8(ascii: "\"")) else { return nil }
            return String(decoding: value[..<end], as: UTF8.self)
        }
        return nil
    }

    /// Forwards in flight now, over every peer.
    var inFlight: Int { channels.values.reduce(0) { $0 + $1.pending.count } }

    /// Sends `request` (a whole request frame, `forwarded` flag set) to `member`; `completion` runs on the
    /// loop's queue with the reply or with `unavailable`, at the latest when the deadline passes.
    func forward(
        _ request: inout [UInt8],
        to member: CachetClusterMember,
        probe: Bool = false,
        completion: @escaping (ForwardOutcome) -> Void
    ) {
        if !probe, let health, !health.isRoutable(member) {
            completion(.unavailable("\(member) is marked down; it is probed until it answers", .markedDown))
            return
        }
        let channel = channel(for: member)
        guard channel.pending.count < Self.maximumInFlightPerPeer else {
            completion(
                .unavailable(
                    "\(channel.name) has \(Self.maximumInFlightPerPeer) forwarded requests in flight already",
                    .overloaded
                )
            )
            return
        }
        guard let health else {
            channel.send(&request, timeout: timeout, completion: completion)
            return
        }
        channel.send(&request, timeout: timeout) { outcome in
            health.record(outcome, from: member)
            completion(outcome)
        }
    }

    /// Sends the invalidations due to owners this node stood in for (`Protocol/CLUSTER.md`, "The exact
    /// sequence on an owner's return"): a DEL per key or one CLEAR, with `forwarded` set; an OK (or a
    /// NOT_FOUND for a DEL) acknowledges it, anything else leaves it to be sent again on a later tick.
    private func deliverInvalidations() {
        guard let health else { return }
        for (owner, invalidation) in health.invalidationsToSend() {
            var frame: [UInt8]
            switch invalidation {
            case .delete(let key):
                frame = CachetCommand.delete(key: key).encoded(id: 0, flags: [.forwarded, .invalidation])
            case .clear: frame = CachetCommand.clear.encoded(id: 0, flags: [.forwarded, .invalidation])
            }
            forward(&frame, to: owner) { [weak self] outcome in
                var acknowledged = false
                if case .answered(let status, _) = outcome {
                    acknowledged = status == .ok || (status == .notFound && invalidation != .clear)
                }
                let drop = health.invalidationAnswered(invalidation, ownerID: owner.id, acknowledged: acknowledged)
                if !drop.isEmpty { self?.dropLocalCopies?(drop) }
            }
        }
    }

    private func channel(for member: CachetClusterMember) -> PeerChannel {
        if let channel = channels[member], channel.state != .closed { return channel }
        let channel = PeerChannel(member: member, loop: loop, maximumReplyLength: maximumReplyLength)
        channel.onClose = { [weak self] closed in
            guard let self, channels[closed.member] === closed else { return }
            channels[closed.member] = nil
        }
        channels[member] = channel
        // Names are resolved off the loop (getaddrinfo blocks, for as long as DNS takes: a Kubernetes
        // member is a DNS name); requests sent meanwhile wait in the channel's output, under their deadline.
        let address = CachetAddress(host: member.host, port: member.port)
        let (loop, timeout) = (loop, timeout)
        DispatchQueue.global(qos: .userInitiated).async {
            let resolved: Result<[CachetSocketAddress], CachetIOError>
            do throws(CachetIOError) {
                resolved = .success(try address.resolve())
            } catch {
                resolved = .failure(error)
            }
            loop.execute {
                switch resolved {
                case .success(let addresses):
                    if channel.state == .idle { loop.connect(channel, to: addresses, timeout: timeout) }
                case .failure(let error):
                    channel.close()
                    channel.fail(error)
                }
            }
        }
        return channel
    }
}
