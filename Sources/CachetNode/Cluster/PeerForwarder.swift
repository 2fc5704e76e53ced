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
/// for others. Clients' GETs of one key share one upstream request while it is in the air
/// (``forward(_:completion:)``, "Singleflight" in CLUSTER.md). Used only on its loop's queue, but for
/// ``start(probeInterval:)`` and ``stop()``.
///
/// `@unchecked Sendable`: every property but the immutable ones is touched only on the loop's queue
/// (``start(probeInterval:)`` hands the probing to it with `execute`). `@exclusivity(unchecked)` on the
/// properties touched per forward: the run-time check costs two runtime calls per access (as for
/// `Connection`), and the single queue keeps accesses from overlapping.
final class PeerForwarder: @unchecked Sendable {
    /// Forwards in flight to one peer at most.
    static let maximumInFlightPerPeer = 1024

    let loop: CachetEventLoop
    let timeout: Duration
    /// The node's view of its peers, fed with every outcome here; nil leaves health out.
    let health: NodeHealth?
    private let maximumReplyLength: Int
    private let logger: Logger
    @exclusivity(unchecked) private var channels: [CachetClusterMember: PeerChannel] = [:]
    /// A second connection per peer for the invalidations that confirm a peer's write
    /// (``ForwardRequest/confirmation``): the peer answers them at once, and they never wait behind the
    /// forwards on ``channels``, which that peer may be sending on to this node (a request waiting for its
    /// confirmation would otherwise wait for itself until its deadline).
    @exclusivity(unchecked) private var controlChannels: [CachetClusterMember: PeerChannel] = [:]
    /// Deletes the local copies of keys whose owner has been told (set by the loop: it has the store).
    var dropLocalCopies: (([[UInt8]]) -> Void)?
    /// Reads the local value of a key and its TTL left in seconds (0: none), from the memory tier or else
    /// the disk tier, and calls back on the loop with it, or with nil when neither holds a live one (set by
    /// the loop: it has the store).
    var readLocalValue: (([UInt8], @escaping ((value: [UInt8], ttl: UInt32)?) -> Void) -> Void)?
    /// Clients' GETs in the air, by key: a GET of a key already asked of the same member waits for that
    /// request's reply instead of sending its own.
    @exclusivity(unchecked) private var flights = CachetSingleflight<FlightKey, UInt64>()
    /// Where each flight went (a GET routed elsewhere does not join it), on which channel, and that
    /// channel's ``PeerChannel/handOffs`` when the flight's request was written.
    @exclusivity(unchecked) private var flightTargets:
        [UInt64: (member: CachetClusterMember, channel: PeerChannel, handOffs: UInt64)] = [:]
    /// The completions of the GETs waiting for a flight, by waiter token.
    @exclusivity(unchecked) private var waiters: [UInt64: (ForwardOutcome) -> Void] = [:]
    @exclusivity(unchecked) private var nextWaiter: UInt64 = 0

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
        credentials: PeerCredentials? = nil,
        logger: Logger
    ) {
        self.loop = loop
        self.timeout = timeout
        self.maximumReplyLength = maximumReplyLength
        self.health = health
        self.credentials = credentials
        self.logger = logger
    }

    /// The TLS context peer connections use in a TLS-only cluster and the AUTH they send first in a
    /// cluster whose members have users; nil: plain TCP, no AUTH.
    private let credentials: PeerCredentials?

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
        let checks = health.map { PeerChecks(forwarder: self, health: $0) }
        func run() {
            guard let health else { return }
            sinceRoutine += tick
            let routine = sinceRoutine >= interval
            if routine {
                sinceRoutine = .zero
                routines += 1
                // Every tenth round, compare memberships: a STATS of each routable peer, for its hash; every
                // round while some peer has not been seen reading this node's membership (after a change).
                if routines % 10 == 1 || !health.membershipComparison.everyRoutablePeerAgrees {
                    compareMemberships(health)
                }
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
            checks?.askDue()
            _ = loop.schedule(after: tick) { run() }
        }
        _ = loop.schedule(after: tick) { run() }
    }

    /// Sends `frame` (a PING, with `forwarded`) to every peer of the membership in force, up or not, on the
    /// control connections, and calls `completion` once each has answered or failed, with how many
    /// answered OK. Each answer feeds the peers' health as a probe's does; a failure does only with
    /// `recordingFailures` (a member greeting its peers as it starts does not count those that have not
    /// started yet as down: the probes will). Called on the loop's queue.
    func pingEveryPeer(
        _ frame: [UInt8],
        recordingFailures: Bool = true,
        completion: @escaping (_ answered: Int, _ peers: Int) -> Void
    ) {
        ask(health?.peers() ?? [], frame, recordingFailures: recordingFailures) { outcomes in
            let answered = outcomes.count { if case .answered(.ok, _) = $0 { return true } else { return false } }
            completion(answered, outcomes.count)
        }
    }

    /// Sends `frame` (a PING with `forwarded`) to each of `peers` on the control connections, as a probe (a
    /// member marked down is asked too), and calls `completion` once each has answered or failed, with every
    /// outcome in `peers`' order (none without peers); `each` runs with each outcome as it comes. Answers feed
    /// the peers' health; failures do only with `recordingFailures`. Called on the loop's queue.
    func ask(
        _ peers: [CachetClusterMember],
        _ frame: [UInt8],
        recordingFailures: Bool = true,
        each: @escaping (CachetClusterMember, ForwardOutcome) -> Void = { _, _ in },
        completion: @escaping ([ForwardOutcome]) -> Void
    ) {
        guard !peers.isEmpty else { return completion([]) }
        var outcomes = [ForwardOutcome?](repeating: nil, count: peers.count)
        var remaining = peers.count
        for (index, member) in peers.enumerated() {
            var request = frame
            forward(&request, to: member, probe: true, control: true, recording: recordingFailures) { outcome in
                outcomes[index] = outcome
                each(member, outcome)
                remaining -= 1
                if remaining == 0 { completion(outcomes.map { $0.unsafelyUnwrapped }) }
            }
        }
    }

    /// Asks every routable peer for its STATS and records whether its membership hash (`cluster_hash`)
    /// differs from this node's: nodes that read different cluster files route keys differently.
    private func compareMemberships(_ health: NodeHealth) {
        // Not `membersToProbe()`: that marks the down peers that are due as probed.
        let peers = health.routablePeers()
        health.membershipComparison.setRoutable(peers)
        for member in peers {
            var stats = CachetCommand.stats.encoded(id: 0, flags: .forwarded)
            forward(&stats, to: member) { outcome in
                guard case .answered(.ok, let body) = outcome,
                    let hash = StatsBodyFields.string("cluster_hash", in: body)
                else { return }
                let previous = StatsBodyFields.string("cluster_previous_hash", in: body).flatMap { previous in
                    StatsBodyFields.number("cluster_changed_ms_ago", in: body).map {
                        (hash: previous, millisecondsAgo: $0)
                    }
                }
                health.membershipComparison.record(hash, previous: previous, of: member, logger: self.logger)
            }
        }
    }

    /// Forwards in flight now, over every peer.
    var inFlight: Int { (Array(channels.values) + controlChannels.values).reduce(0) { $0 + $1.pending.count } }

    /// Sends `request` (a whole request frame, `forwarded` flag set) to `member`; `completion` runs on the
    /// loop's queue with the reply or with `unavailable`, at the latest when the deadline passes.
    func forward(
        _ request: inout [UInt8],
        to member: CachetClusterMember,
        probe: Bool = false,
        control: Bool = false,
        secondHop: Bool = false,
        recording recordingFailures: Bool = true,
        completion: @escaping (ForwardOutcome) -> Void
    ) {
        // A second hop answers within half the deadline, so that the member waiting on this node for it gets
        // an answer (UNAVAILABLE at worst) before its own deadline, rather than counting this node as slow.
        let timeout = secondHop ? timeout / 2 : timeout
        var recordingFailures = recordingFailures
        if !probe, let health, !health.isRoutable(member) {
            guard health.mayForward(to: member) else {
                completion(.unavailable("\(member) is marked down; it is probed until it answers", .markedDown))
                return
            }
            // Down here by timeouts, unconfirmed: its answer brings it back, but its failures are left to
            // the probe (one at a time, with its backoff), which they would otherwise stand for.
            recordingFailures = false
        }
        let channel = channel(for: member, control: control)
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
        channel.send(&request, timeout: timeout) { [weak self] outcome in
            if case .answered = outcome {
                health.record(outcome, from: member)
            } else if recordingFailures {
                health.record(outcome, from: member)
            }
            if probe, case .unavailable(_, .timedOut) = outcome { self?.abandon(channel) }
            completion(outcome)
        }
    }

    /// Forwards a client's GET, PUT or DEL to `request.owner` (its owner or stand-in); `completion` runs on
    /// the loop's queue with the reply or with `unavailable`, as ``forward(_:to:probe:completion:)``'s.
    ///
    /// Singleflight (`Protocol/CLUSTER.md`, "Forwarding"): a GET of a key for which a GET sent to the same
    /// member is in the air sends nothing and gets that request's outcome, status and body (the caller
    /// writes it with its own client's opcode and id). A PUT or DEL of the key detaches the flight, so that
    /// GETs forwarded after the write start a new one; so does a GET routed to another member (the owner
    /// went down or came back meanwhile). With the table full (4096 flights, 1024 waiters on one), a GET
    /// goes on its own. Probes, STATS comparisons, invalidations and fan-outs never use this path.
    /// - Parameters:
    ///   - request: the client's request, its frame with `forwarded` set.
    ///   - completion: runs once with the outcome.
    /// - Returns: `true` when the GET joined a flight in the air (nothing was sent for it).
    @discardableResult
    func forward(_ request: ForwardRequest, completion: @escaping (ForwardOutcome) -> Void) -> Bool {
        var frame = request.frame
        guard let keyBytes = request.key else {
            forward(&frame, to: request.owner, secondHop: request.secondHop, completion: completion)
            return false
        }
        let key = FlightKey(bytes: keyBytes)
        guard request.opcode == .get, !request.warmUp, !request.asksTTL, !request.asksRange else {
            if request.opcode != .get { flights.detach(key) }
            forward(
                &frame,
                to: request.owner,
                control: request.confirmation,
                secondHop: request.secondHop,
                completion: completion
            )
            return false
        }
        // A GET joins only a flight to the member it is routed to now whose request has not left this node
        // yet: the owner then reads the key after this GET arrived, so the shared reply is never older than
        // a write acknowledged before this GET was sent (a request already on its way could have been read
        // before such a write, through another node, was applied).
        if let flight = flights.flight(for: key), let target = flightTargets[flight],
            target.member != request.owner || target.channel.handOffs != target.handOffs
                || target.channel.state == .closed
        {
            flights.detach(key)
        }
        let waiter = nextWaiter
        switch flights.join(key, waiter: waiter) {
        case .full:
            forward(&frame, to: request.owner, secondHop: request.secondHop, completion: completion)
            return false
        case .joined:
            nextWaiter += 1
            waiters[waiter] = completion
            return true
        case .leader(let flight):
            nextWaiter += 1
            waiters[waiter] = completion
            // The completion may run before `forward` returns (a member marked down, the cap reached): the
            // flight then ends at once, with this waiter alone.
            var ended = false
            forward(&frame, to: request.owner, secondHop: request.secondHop) { [self] outcome in
                ended = true
                flightTargets[flight] = nil
                for token in flights.complete(flight) {
                    let completion = waiters.removeValue(forKey: token)
                    completion?(outcome)
                }
            }
            if !ended, let channel = channels[request.owner] {
                flightTargets[flight] = (request.owner, channel, channel.handOffs)
            } else if !ended {
                // No channel carries it (not sent): nobody joins it.
                flights.detach(key)
            }
            return false
        }
    }

    /// Closes `channel` after a probe on it got no answer in time, unless other requests still wait on it,
    /// so that the next probe connects afresh. Packets lost on a connection (a network partition) are
    /// retransmitted by TCP with a backoff that doubles with every loss, up to two minutes: after the
    /// network heals, what is sent on that connection waits for the next retransmission, about as long as
    /// the outage lasted, while a new connection's SYN goes out at once. Without this, a peer that comes
    /// back after a partition is noticed (and its invalidations delivered, `Protocol/CLUSTER.md`,
    /// "Failover without stale reads") that much later, not within the probe backoff the hold is sized for.
    private func abandon(_ channel: PeerChannel) {
        guard channel.state != .closed, channel.pending.isEmpty else { return }
        channel.close()
    }

    /// Sends the invalidations due to owners this node stood in for (`Protocol/CLUSTER.md`, "The exact
    /// sequence on an owner's return"): a DEL per key or one CLEAR, with `forwarded` set, or for a key whose
    /// local value may be handed back, that value (read from memory, or else from the disk tier, which
    /// answers later); an OK (or a NOT_FOUND for a DEL) acknowledges it, anything else leaves it to be sent
    /// again on a later tick.
    private func deliverInvalidations() {
        guard let health else { return }
        for (owner, invalidation) in health.invalidationsToSend() {
            switch invalidation {
            case .delete(let key):
                guard health.mayHandBack(key, ownerID: owner.id), let readLocalValue else {
                    sendInvalidation(invalidation, to: owner, value: nil)
                    continue
                }
                readLocalValue(key) { [weak self] local in
                    // Asked again: a write the owner passed on here meanwhile makes the local value one
                    // not to hand back.
                    let value = local.flatMap { health.mayHandBack(key, ownerID: owner.id) ? $0 : nil }
                    self?.sendInvalidation(invalidation, to: owner, value: value)
                }
            case .clear:
                sendInvalidation(invalidation, to: owner, value: nil)
            }
        }
    }

    /// Sends one invalidation to `owner`: the value with its TTL when there is one to hand back (the owner
    /// takes it only if no other stand-in has told it of the key in its hold), else the DEL or CLEAR.
    private func sendInvalidation(
        _ invalidation: CachetStandInLog.Invalidation,
        to owner: CachetClusterMember,
        value: (value: [UInt8], ttl: UInt32)?
    ) {
        guard let health else { return }
        var frame: [UInt8]
        switch invalidation {
        case .delete(let key):
            if let (value, ttl) = value {
                frame = CachetCommand.put(key: key, value: value, ttl: ttl).encoded(
                    id: 0,
                    flags: [.forwarded, .invalidation]
                )
            } else {
                frame = CachetCommand.delete(key: key).encoded(id: 0, flags: [.forwarded, .invalidation])
            }
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

    private func channel(for member: CachetClusterMember, control: Bool = false) -> PeerChannel {
        if let channel = control ? controlChannels[member] : channels[member], channel.state != .closed {
            return channel
        }
        let channel = PeerChannel(member: member, loop: loop, maximumReplyLength: maximumReplyLength)
        let (tls, authRequest) = credentials?.inForce ?? (nil, nil)
        if let tls { channel.useTLS(tls) }
        // Written before the connection exists: the first bytes it carries, before any forward.
        if let authRequest { channel.write(authRequest) }
        channel.onClose = { [weak self] closed in
            guard let self else { return }
            if control {
                if controlChannels[closed.member] === closed { controlChannels[closed.member] = nil }
            } else if channels[closed.member] === closed {
                channels[closed.member] = nil
            }
        }
        if control { controlChannels[member] = channel } else { channels[member] = channel }
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
