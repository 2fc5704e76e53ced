import CachetAuth
import CachetCluster
import CachetIO
import CachetLocking
public import CachetStore
import CachetWire
import Dispatch
public import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A Cachet node: a listening socket, a few I/O queues serving connections, and the storage tiers.
///
/// Lifecycle: ``init(configuration:logger:)`` builds nothing that runs; ``start()`` binds and starts
/// serving; ``shutdown(timeout:)`` stops accepting, lets every connection finish the requests it has sent,
/// and returns once they are closed. ``run(until:)`` does the last on SIGTERM or SIGINT.
public final class CachetNodeServer: Sendable {
    /// The software version reported by STATS.
    public static let version = "0.4.0"

    /// The version the memcached port reports (`version`, `stats`): the memcached release whose text protocol
    /// it speaks. Clients parse it and adapt to it (libmemcached refuses a major version of 0, and its
    /// conformance run expects 1.6's answers from a 1.6); `stats` gives this node's own as `cachet_version`.
    public static let memcacheVersion = "1.6.0"

    /// The configuration the node was created with.
    public let configuration: CachetNodeConfiguration
    /// The memory tier.
    public let memory: CachetMemoryStore
    private let logger: Logger
    private let disk: DiskTier?
    private let loops: [NodeIOQueue]
    /// The owner's hold of a node in a cluster of more than one; nil otherwise.
    private let hold: NodeReturnHold?
    private let statistics: NodeStatistics
    private let nextLoop = Atomic<Int>(0)
    private let state = CachetLock(RunState())
    private let maintenanceQueue = DispatchQueue(label: "cachet.maintenance", qos: .utility)

    private struct RunState {
        /// The listening sockets, on the first I/O loop (which hands connections to every loop, round robin).
        var listeners: [CachetListener] = []
        /// The port each kind of listener is bound to.
        var ports: [ListenerKind: Int] = [:]
        var sweepTimer: (any DispatchSourceTimer)?
        var started = false
        var stopped = false
    }

    /// Creates a node. Nothing runs until ``start()``.
    /// - Parameters:
    ///   - configuration: flags and limits.
    ///   - logger: where the node logs; it adds `io.loop` and `connection.fd` metadata.
    /// - Throws: ``CachetNodeError`` when the configuration is invalid or the system refuses resources.
    public init(configuration: CachetNodeConfiguration, logger: Logger) throws(CachetNodeError) {
        try configuration.validate()
        self.configuration = configuration
        self.logger = logger
        let watches = NodeWatchHub(
            ringLimit: configuration.watchBufferBytes,
            retain: configuration.watchRetainSeconds,
            sendLimit: configuration.watchSendLimit
        )
        // Entries that expire or are evicted: WATCH events, from the memory tier on a node without a disk
        // tier; with one, memory's evictions stay on disk, and the disk tier announces what it drops.
        let evictionsLeaveTheCache = configuration.disk.map { $0.limit == 0 } ?? true
        let memory = CachetMemoryStore(
            configuration: CachetMemoryStoreConfiguration(
                memoryLimit: configuration.memoryLimit,
                shardCount: configuration.memoryShardCount
            ),
            observer: { key, reason in
                switch reason {
                case .expired: if evictionsLeaveTheCache { watches.publish(.expired, key: key) }
                case .evicted: if evictionsLeaveTheCache { watches.publish(.evicted, key: key) }
                }
            }
        )
        self.memory = memory
        let disk = try configuration.disk.flatMap { (disk) throws(CachetNodeError) in
            try DiskTier.open(
                disk,
                clusterMember: configuration.cluster != nil,
                largeValueThreshold: configuration.largeValueThreshold,
                uploadIdleSeconds: configuration.uploadIdleSeconds,
                watches: watches,
                logger: logger
            )
        }
        self.disk = disk
        let statistics = NodeStatistics(
            configuration: configuration,
            memory: memory,
            disk: disk,
            loopCount: configuration.ioQueueCount
        )
        self.statistics = statistics
        let connectionMemory = statistics.connectionMemory
        var loops: [NodeIOQueue] = []
        let parts = NodeClusterParts(configuration: configuration, disk: disk, statistics: statistics, logger: logger)
        let (hold, health, warmUp) = (parts.hold, parts.health, parts.warmUp)
        self.hold = hold
        // A member of a TLS-only cluster reaches its peers over TLS, presenting its own certificate.
        var peerTLS: CachetTLSContext?
        if configuration.tlsOnly, configuration.cluster != nil, let tls = configuration.tls {
            do throws(CachetIOError) {
                peerTLS = try CachetTLSContext(role: .client, configuration: Self.peerTLSConfiguration(tls))
            } catch {
                throw CachetNodeError(code: .invalidConfiguration, message: "peers' TLS: \(error.message)")
            }
        }
        let peerCredentials = PeerCredentials(
            tls: peerTLS,
            authRequest: configuration.peerCredential.map {
                PeerCredentials.authRequest(user: $0.user, secret: $0.secret)
            }
        )
        self.peerCredentials = peerCredentials
        let leases = NodeLeases(lifetime: configuration.leaseSeconds)
        statistics.leases.withLock { $0 = leases }
        statistics.watches.withLock { $0 = watches }
        let watchViews = (0..<configuration.ioQueueCount).map { _ in WatchIndexView() }
        let casSource = CachetCASSource()
        let auth = try configuration.authFile.map { path throws(CachetNodeError) in try NodeAuth(path: path) }
        self.auth = auth
        for index in 0..<configuration.ioQueueCount {
            // A node with a cluster file may have peers (now or after a reload); a cluster of one never
            // forwards and pays nothing for it.
            let router = configuration.cluster == nil ? nil : ForwardRouter(membership: statistics.membership)
            loops.append(
                try NodeIOQueue(
                    index: index,
                    processor: RequestProcessor(
                        store: memory,
                        disk: disk,
                        counters: statistics.loopCounters[index],
                        maximumPayloadLength: configuration.maximumPayloadLength,
                        largeValueThreshold: configuration.largeValueThreshold,
                        statistics: { statistics.json(includingMembers: $0) },
                        connectionMemory: connectionMemory,
                        cluster: router.flatMap { router in
                            health.map { ClusterRouting(router: router, health: $0, hold: hold, warmUp: warmUp) }
                        },
                        auth: auth,
                        leases: leases,
                        watches: watches,
                        watchView: watchViews[index],
                        casSource: casSource
                    ),
                    router: router,
                    outputLimit: configuration.outputHighWatermark,
                    memory: connectionMemory,
                    stallTimeout: configuration.clientStallTimeout,
                    forwardTimeout: configuration.cluster == nil ? nil : configuration.forwardTimeout,
                    peerCredentials: peerCredentials,
                    health: health,
                    // One loop probes for the node; every loop's forwards feed the same view.
                    probeInterval: index == 0 ? configuration.probeInterval : nil,
                    lingerMilliseconds: configuration.ioLingerMilliseconds,
                    logger: logger,
                    onClose: { statistics.connectionsCurrent.subtract(1, ordering: .relaxed) }
                )
            )
            let queue = loops[index]
            watches.attach(watchViews[index]) { work in queue.execute(work) }
        }
        self.loops = loops
    }

    /// The port the node listens on, once started (useful with port 0).
    public var port: Int { state.withLockUnchecked { $0.ports[.native] ?? 0 } }

    /// The TLS listener's port, once started; nil without `--tls-port`.
    public var tlsPort: Int? { state.withLockUnchecked { $0.ports[.nativeTLS] } }

    /// The memcached port, once started with ``CachetNodeConfiguration/memcachedPort``; nil otherwise.
    public var memcachedPort: Int? { state.withLockUnchecked { $0.ports[.memcache] } }

    /// The memcached TLS port, once started with ``CachetNodeConfiguration/memcachedTLSPort``; nil otherwise.
    public var memcachedTLSPort: Int? { state.withLockUnchecked { $0.ports[.memcacheTLS] } }

    /// The HTTP port, once started with ``CachetNodeConfiguration/httpPort``; nil otherwise.
    public var httpPort: Int? { state.withLockUnchecked { $0.ports[.http] } }

    /// The HTTPS port, once started with ``CachetNodeConfiguration/httpsPort``; nil otherwise.
    public var httpsPort: Int? { state.withLockUnchecked { $0.ports[.https] } }

    /// The node's users (`--auth-file`); nil without one.
    private let auth: NodeAuth?

    /// What this member presents to its peers, read again on SIGHUP.
    private let peerCredentials: PeerCredentials

    /// Reads the auth file again (SIGHUP): AUTH from now on uses the new users; connections authenticated
    /// before keep theirs. A file that cannot be read leaves the previous users in force, with a log line.
    /// The peer secret's file (`--peer-secret-file`) is read again too: new peer connections send it.
    public func reloadAuth() {
        if let (user, _) = configuration.peerCredential, let file = configuration.peerSecretFile {
            do throws(CachetAuthError) {
                if let secret = try CachetSecretSource.read(file: file, environmentVariable: "CACHET_PEER_SECRET") {
                    peerCredentials.replaceAuthRequest(PeerCredentials.authRequest(user: user, secret: secret))
                    logger.notice("peer secret read again", metadata: ["auth.peer_secret_file": "\(file)"])
                }
            } catch {
                logger.error(
                    "peer secret not reloaded; the previous one stays in use",
                    metadata: ["error.message": "\(error.message)"]
                )
            }
        }
        guard let auth else { return }
        switch auth.reload() {
        case .success(let users):
            logger.notice("auth file read again", metadata: ["auth.file": "\(auth.path)", "auth.users": "\(users)"])
        case .failure(let error):
            logger.error(
                "auth file not reloaded; the previous users stay in force",
                metadata: ["error.message": "\(error.message)"]
            )
        }
    }

    /// The TLS configuration of peer connections: this node's certificate and key as the client's, the
    /// cluster's CA.
    static func peerTLSConfiguration(_ tls: CachetTLSConfiguration) -> CachetTLSConfiguration {
        CachetTLSConfiguration(certificateFile: tls.certificateFile, keyFile: tls.keyFile, caFile: tls.caFile)
    }

    /// The context new TLS connections get: made at start, made again from the files on SIGHUP.
    private let tlsContext = CachetLock<CachetTLSContext?>(nil)

    /// Reads the TLS certificate, key and CA files again (SIGHUP): connections accepted from now on use
    /// them, open ones keep theirs. Files that cannot be read or do not fit leave the previous ones in use,
    /// with a log line saying why.
    public func reloadTLS() {
        guard let configuration = configuration.tls, configuration.certificateFile != nil else { return }
        do throws(CachetIOError) {
            let context = try CachetTLSContext(role: .server, configuration: configuration)
            // A TLS-only member presents the same certificate to its peers.
            let peerContext =
                self.configuration.tlsOnly && self.configuration.cluster != nil
                ? try CachetTLSContext(role: .client, configuration: Self.peerTLSConfiguration(configuration)) : nil
            tlsContext.withLock { $0 = context }
            if let peerContext { peerCredentials.replaceTLS(peerContext) }
            logger.notice(
                "TLS certificate and key read again",
                metadata: ["tls.cert": "\(configuration.certificateFile ?? "")"]
            )
        } catch {
            logger.error(
                "TLS files not reloaded; the previous ones stay in use",
                metadata: ["error.message": "\(error.message)"]
            )
        }
    }

    /// The STATS reply body, as JSON.
    public var statisticsJSON: String { statistics.json() }

    /// The node's figures in Prometheus's text format (`/metrics`), named as memcached_exporter names
    /// memcached's. Read from the loops' counters at each call.
    public var metricsText: String { statistics.prometheusText() }

    /// Whether the node serves its keys now (`/health/ready`): not while it holds after an absence, is in
    /// the minority, or rebuilds its disk index; with the reason.
    public var readiness: (ready: Bool, reason: String) { statistics.readiness() }

    /// The node's cluster: its id, the membership in force, reloading on SIGHUP.
    public var membership: CachetNodeMembership { statistics.membership }

    /// Binds the listening socket and starts serving.
    /// - Returns: the bound port.
    /// - Throws: ``CachetNodeError`` `addressUnusable` when the address cannot be bound.
    @discardableResult
    public func start() throws(CachetNodeError) -> Int {
        signal(SIGPIPE, SIG_IGN)
        raiseDescriptorLimit()
        if configuration.tlsPort != nil || configuration.tlsOnly || configuration.memcachedTLSPort != nil
            || configuration.httpsPort != nil,
            let tlsConfiguration = configuration.tls
        {
            do throws(CachetIOError) {
                let context = try CachetTLSContext(role: .server, configuration: tlsConfiguration)
                tlsContext.withLock { $0 = context }
            } catch {
                throw CachetNodeError(code: .invalidConfiguration, message: error.message)
            }
        }
        let bound = try ListenerKind.bindAll(configuration)
        let nativePort = bound.first(where: { $0.kind == .native })?.port ?? 0
        disk?.store.startRecovery()
        for loop in loops { loop.start() }
        hold?.start()
        let acceptFailed: (CachetIOError) -> Void = { [logger] error in
            logger.warning("accept failed", metadata: ["error.message": "\(error.message)"])
            if error.code == .resourceExhausted {
                // Out of descriptors or memory: the listening socket stays readable.
                logger.warning("pausing accepts for 100 ms")
            }
        }
        let languages = Dictionary(
            uniqueKeysWithValues: bound.map { socket in
                let language = socket.kind.language(
                    in: configuration,
                    requiresAuth: auth != nil,
                    statistics: statistics
                )
                return (socket.kind, language)
            }
        )
        let tlsOnly = configuration.tlsOnly
        let listeners = bound.map { socket in
            let kind = socket.kind
            let usesTLS = kind == .native ? tlsOnly : kind.usesTLS
            let language = languages[kind] ?? .native
            return CachetListener(
                accepted: { [self] fd in admit(fd, tls: usesTLS, language: language) },
                failed: acceptFailed
            )
        }
        let timer = DispatchSource.makeTimerSource(queue: maintenanceQueue)
        let interval = configuration.sweepInterval
        timer.schedule(deadline: .now() + interval, repeating: interval)
        let memory = memory
        let budget = configuration.sweepBudget
        let diskWorker = disk?.worker
        let disk = disk
        timer.setEventHandler {
            let now = CachetClock.now()
            _ = memory.sweepExpired(now: now, budget: budget)
            // Queued behind pending writes; skipped while an earlier sweep still waits there.
            diskWorker?.submitSweep(now: now, budget: budget)
            if let disk {
                for upload in disk.uploads.sweep(now: now) { disk.worker.abortUpload(upload) }
            }
        }
        state.withLockUnchecked { state in
            state.listeners = listeners
            for socket in bound { state.ports[socket.kind] = socket.port }
            state.sweepTimer = timer
            state.started = true
        }
        // Connections wait in the listening socket's backlog until the peers are greeted.
        peerGreetings?.greet()
        let acceptingLoop = loops[0].loop
        acceptingLoop.executeAndWait {
            for (listener, socket) in zip(listeners, bound) {
                acceptingLoop.register(listener, fd: socket.fd, isNonBlocking: true)
            }
        }
        timer.activate()
        logger.info(
            "node started",
            metadata: [
                "node.address": "\(CachetAddress(host: configuration.host, port: nativePort))",
                "node.ports": "\(bound.map { "\($0.kind.flag) \($0.port)" }.joined(separator: ", "))",
                "node.io_queues": "\(configuration.ioQueueCount)",
                "node.io_linger_ms": "\(configuration.ioLingerMilliseconds)",
                "memory.limit": "\(configuration.memoryLimit)",
                "disk.limit": "\(disk?.limit ?? 0)",
                "disk.directory": "\(configuration.disk?.directory ?? "")",
            ]
        )
        return nativePort
    }

    /// Raises the soft limit on open descriptors towards the hard limit so that `--max-connections` can be
    /// reached, and warns when it still cannot.
    private func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        let wanted = rlim_t(configuration.maximumConnections + 64)
        if limit.rlim_cur < wanted && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = min(wanted, limit.rlim_max)
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        if limit.rlim_cur < wanted {
            logger.warning(
                "the open-file limit is below --max-connections; raise it (ulimit -n) or lower the flag",
                metadata: [
                    "limit.nofile": "\(limit.rlim_cur)", "node.max_connections": "\(configuration.maximumConnections)",
                ]
            )
        }
    }

    /// Takes an accepted connection (on the accepting loop's queue): counts it, and hands it to an I/O
    /// loop, round robin, or answers it UNAVAILABLE past `--max-connections`.
    private func admit(_ fd: Int32, tls: Bool, language: ConnectionLanguage) {
        let current = statistics.connectionsCurrent.add(1, ordering: .relaxed).newValue
        if current > configuration.maximumConnections {
            statistics.connectionsCurrent.subtract(1, ordering: .relaxed)
            statistics.connectionsRejected.add(1, ordering: .relaxed)
            reject(fd)
            return
        }
        statistics.connectionsTotal.add(1, ordering: .relaxed)
        let loop = loops[nextLoop.add(1, ordering: .relaxed).newValue % loops.count]
        guard tls else { return loop.execute { loop.register(fd: fd, speaking: language) } }
        guard let context = tlsContext.withLock({ $0 }) else {
            statistics.connectionsCurrent.subtract(1, ordering: .relaxed)
            return CachetSocket.close(fd)
        }
        let deadline = configuration.tlsHandshakeTimeout
        loop.execute { loop.register(fd: fd, tls: context, handshakeDeadline: deadline, speaking: language) }
    }

    /// Answers a connection over the limit with UNAVAILABLE and closes it (gracefully, on an I/O loop).
    private func reject(_ fd: Int32) {
        var reply: [UInt8] = []
        CachetResponse(
            opcode: .none,
            status: .unavailable,
            id: 0,
            body: Array("too many connections (--max-connections \(configuration.maximumConnections))".utf8)
        ).encode(to: &reply)
        let loop = loops[nextLoop.add(1, ordering: .relaxed).newValue % loops.count]
        loop.execute { [reply] in loop.reject(fd: fd, reply: reply) }
    }

    /// Stops accepting, lets each connection finish the requests it has sent and receive the replies,
    /// closes each gracefully (FIN after its last reply), then finishes the queued disk writes. Connections
    /// still open after `timeout` seconds are closed anyway.
    /// - Parameter timeout: seconds to wait for connections to finish; `--shutdown-timeout` when nil.
    public func shutdown(timeout: Double? = nil) {
        let timeout = timeout ?? configuration.shutdownTimeout
        let started = DispatchTime.now()
        typealias Stopping = ([CachetListener], (any DispatchSourceTimer)?)
        let (listeners, timer) = state.withLockUnchecked { state -> Stopping in
            guard state.started, !state.stopped else { return ([], nil) }
            state.stopped = true
            defer {
                state.listeners = []
                state.sweepTimer = nil
            }
            return (state.listeners, state.sweepTimer)
        }
        guard !listeners.isEmpty else { return }
        let acceptingLoop = loops[0].loop
        acceptingLoop.executeAndWait {
            for listener in listeners { listener.close() }
        }
        timer?.cancel()
        let group = DispatchGroup()
        // A node reads nothing more once it stops, answers what it had read (for a second at most), and
        // closes every connection gracefully: a stop takes what the disk queue takes rather than the time a
        // busy client needs to fall idle. A cluster member answers nothing more at all: its peers take
        // writes of its keys once they know, and it must not take any on connections opened before. Every
        // loop has stopped answering before the peers are told, and closes its connections after.
        let leaving = configuration.cluster != nil
        var told: (() -> (answered: Int, peers: Int))?
        if leaving {
            // Nothing more is answered, then the peers are told, and the connections close at once: a peer
            // whose forward is left unanswered sends it elsewhere (to the stand-in once told, or here again,
            // where the closed port marks this member down).
            for loop in loops { loop.executeAndWait { loop.upkeep.stopAnswering() } }
            told = peerGreetings?.announceLeaving(id: membership.nodeID) ?? { (0, 0) }
        }
        for loop in loops {
            group.enter()
            loop.execute { loop.upkeep.drain(timeout: timeout, leaving: leaving) { group.leave() } }
        }
        if group.wait(timeout: .now() + timeout) == .timedOut {
            logger.warning(
                "connections still busy at shutdown were closed",
                metadata: ["shutdown.timeout": "\(timeout)"]
            )
        }
        if let told {
            // The notices go out on the peer connections, which the loops close when they stop.
            let (answered, peers) = told()
            logger.notice(
                "left the cluster: peers told to send this member's keys to their stand-ins",
                metadata: ["cluster.member": "\(membership.nodeID)", "cluster.peers_told": "\(answered)/\(peers)"]
            )
        }
        for loop in loops { loop.executeAndWait { loop.upkeep.stop() } }
        hold?.stop()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        logger.info(
            "connections closed",
            metadata: [
                "shutdown.seconds": "\(NodeStatistics.decimal(seconds))",
                "disk.queue_depth": "\(disk?.worker.queueDepth ?? 0)",
            ]
        )
        if let disk {
            // Every PUT acknowledged is in this queue or already written.
            disk.worker.drain()
            disk.store.close()
        }
        logger.info("node stopped")
    }

    /// The peer greetings of the first loop's forwarder; nil for a node that does not forward.
    private var peerGreetings: PeerGreetings? {
        loops.first?.forwardCoordinator.map {
            PeerGreetings(forwarder: $0.forwarder, forwardTimeout: configuration.forwardTimeout, logger: logger)
        }
    }

    /// Blocks until `signals` reports SIGTERM or SIGINT, then shuts down gracefully.
    /// - Parameter signals: termination signals, installed before the node announced itself.
    public func run(until signals: CachetTerminationSignals) {
        signals.wait()
        logger.info("termination signal received; draining connections")
        shutdown()
    }
}
