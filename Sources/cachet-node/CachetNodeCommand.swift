import ArgumentParser
import CachetAuth
import CachetHTTP
import CachetIO
import CachetNode
import CachetStore
import Dispatch
import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `cachet-node`: parses flags, starts a node, prints its address, and serves until SIGTERM or SIGINT.
@main
struct CachetNodeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cachet-node",
        abstract: "Runs a Cachet cache node.",
        discussion: """
            Listens for Cachet protocol v1 (Protocol/PROTOCOL.md) and prints one line once ready:
            'cachet-node listening on HOST:PORT'. SIGTERM or SIGINT stops accepting, finishes the requests \
            already received, closes the connections within --shutdown-timeout, writes the queued disk \
            writes, and exits 0. SIGHUP re-reads the --cluster file (Protocol/CLUSTER.md); a bad file is \
            logged and the old membership kept. Sizes take KiB, MiB, GiB suffixes.
            """
    )

    @Option(
        help: """
            Address to listen on: IPv4 (0.0.0.0), IPv6 (::, ::1) or a host name. Default: the --node-id \
            member's host, or 127.0.0.1.
            """
    )
    var host: String?

    @Option(help: "TCP port; 0 picks a free one. Default: the --node-id member's port, or 7420.")
    var port: Int?

    @Option(help: "Cluster file (JSON, see Protocol/CLUSTER.md); without it the node is a cluster of one.")
    var cluster: String?

    @Option(help: "This node's id: its member in the --cluster file (required with --cluster).")
    var nodeId: String?

    @Option(help: "Bytes the memory tier may hold, overhead included (e.g. 256MiB).")
    var memoryLimit = "256MiB"

    @Option(help: "Largest frame payload accepted (e.g. 64MiB).")
    var maxFrame = "64MiB"

    @Option(help: "Connections served at once; more are answered UNAVAILABLE and closed.")
    var maxConnections = 10_000

    @Option(help: "I/O queues (each a serial queue with its own epoll set). Default: 1 on 2 cores, cores-1 above.")
    var ioQueues = CachetNodeConfiguration.defaultIOQueueCount

    @Option(help: "Milliseconds an I/O queue that has served requests waits for more on its own thread (0-1000).")
    var ioLingerMs = 2

    @Option(
        help: """
            Bytes all connections together may hold in buffers and in large PUT values still arriving \
            (e.g. 64MiB). Default: a quarter of --memory-limit, at least --max-frame + 16MiB.
            """
    )
    var connectionMemory: String?

    @Option(
        help: """
            Seconds a connection may hold connection memory without progress (replies not read, a request \
            not finished) while others wait for that memory, before it is closed; 0: never.
            """
    )
    var clientStallTimeout = 3.0

    @Option(
        help: """
            Seconds a request forwarded to the member that owns its key may take (connect included) \
            before the client gets UNAVAILABLE.
            """
    )
    var forwardTimeout = 1.0

    @Option(help: "Seconds between PING probes of each peer taken for up (a down peer is probed on its backoff).")
    var probeInterval = 1.0

    @Option(
        help: """
            Seconds after a cluster membership change (SIGHUP) during which a miss of a key this node did not \
            own before is asked of its previous owner and kept (never for a key written here since); 0: off.
            """
    )
    var warmUpSeconds = 300.0

    @Option(
        help: """
            Seconds a cluster node answers GETs of its own keys with a miss after it may have been away \
            (start, a stall, a lost network), so that stand-ins can tell it what they replaced; longer while \
            their invalidations keep arriving (until --forward-timeout + --probe-interval after the last, \
            at most 4 x this). Default: 10 x --probe-interval + --forward-timeout; 0: no hold.
            """
    )
    var holdPeriod: Double?

    @Option(
        help: """
            Seconds a read-through lease stands: a client whose GET missed loads the value while the others             wait for it, at most this long (0.1 to 3600).
            """
    )
    var leaseTime: Double = 10

    @Option(help: "Bytes of recent changes kept for WATCH (a watcher further behind is sent a GAP).")
    var watchBuffer = "16MiB"

    @Option(help: "Seconds a watched prefix stays recorded after its last watcher leaves, so a watcher resumes.")
    var watchRetain: Double = 60

    @Option(help: "Bytes a watcher may have queued for sending before it waits for its peer to read.")
    var watchSendLimit = "1MiB"

    @Flag(
        help: """
            Keep serving this node's own keys while it reaches fewer than a majority of the cluster's members. \
            By default such a node holds them (GETs miss, writes go to a reachable stand-in or are refused): it \
            may be cut off while another member stands in for them. This flag trades that guarantee (no GET \
            returns a value a stand-in replaced) for availability.
            """
    )
    var serveOwnKeysInMinority = false

    @Flag(
        help: """
            Hold for the whole --hold-period after an absence, even once every peer has said it routes this \
            node's keys here and owes it nothing. By default the hold ends then (at the earliest a forward \
            timeout plus a probe interval after it started), and a restarted member serves its keys within a \
            second or two.
            """
    )
    var holdFullPeriod = false

    @Option(help: "Seconds a shutdown (SIGTERM, SIGINT) may take to answer and close connections.")
    var shutdownTimeout = 10.0

    @Option(
        help: """
            Directory of the disk tier and, in a cluster, of the stand-in log (created if missing; one node per \
            directory).
            """
    )
    var dataDir = "./cachet-data"

    @Option(
        help: """
            Bytes the disk tier may take on disk (e.g. 1GiB): its journal files (5.5 MiB) and its entry files; \
            at least 5.6 MiB; 0 turns the disk tier off (and keeps the stand-in log in memory only).
            """
    )
    var diskLimit = "1GiB"

    @Option(
        help: """
            Values longer than this (e.g. 8MiB) are never held whole in memory: kept on the disk tier only, in blocks a range reads alone. Values sent in parts (PUT with the part flag) can be of any length the disk tier holds. A node without a disk tier (--disk-limit 0) refuses values longer than this (TOO_LARGE).
            """
    )
    var largeValue = "8MiB"

    @Option(help: "Seconds an upload (a value sent in parts) may go without a part before it is given up and freed.")
    var uploadTimeout = 30

    @Option(help: "zlib level for the disk tier, 0 (store) to 9 (smallest).")
    var compressionLevel: Int32?

    @Option(
        help: """
            Also speak memcached's text protocol on this port (11211 is memcached's; 0 picks a free one), on the \
            same store, tiers and cluster, so that memcached clients of any language share the cache. Off unless given.
            """
    )
    var memcachedPort: Int?

    @Option(
        help:
            "memcached's text protocol over TLS on this port (as memcached -Z), with --tls-cert and --tls-key. Off unless given."
    )
    var memcachedTlsPort: Int?

    @Option(
        help:
            "The longest value a memcached client may store (memcached's -I): bytes, or with KiB, MiB. Default: 1MiB, as memcached's."
    )
    var memcachedItemSize = "1MiB"

    @Option(
        help:
            "What memcached's flush_all empties: member (this node; a client with its own ketama sends it to each member, as to a pool of memcached servers) or cluster (every member, as one memcached behind one address). Default: member."
    )
    var memcachedFlush = "member"

    @Option(
        help: "A TLS listener's port, beside the plain --port (0 picks a free one). Needs --tls-cert and --tls-key."
    )
    var tlsPort: Int?

    @Flag(
        help: """
            Make --port speak TLS only (no plain listener). In a cluster, members then reach each other over \
            TLS too, presenting their certificate and checking their peers' against --tls-ca.
            """
    )
    var tlsOnly = false

    @Option(help: "The TLS listener's certificate chain (PEM). Re-read on SIGHUP.")
    var tlsCert: String?

    @Option(help: "The certificate's private key (PEM). Re-read on SIGHUP.")
    var tlsKey: String?

    @Option(help: "CA certificates (PEM) that clients' certificates must chain to.")
    var tlsCa: String?

    @Option(help: "Whether TLS clients present a certificate: none, optional or required (mutual TLS; needs --tls-ca).")
    var tlsClientAuth = "none"

    @Option(help: "Seconds a TLS connection may take to finish its handshake before it is closed.")
    var tlsHandshakeTimeout = 5.0

    @Option(
        help: """
            Users (JSON: name, salted secret hash, role read|write|admin, key prefixes): clients must AUTH \
            first, then may do what their role and prefixes allow. Re-read on SIGHUP. A node on its own only.
            """
    )
    var authFile: String?

    @Option(
        help: """
            In a cluster whose members have --auth-file: the user (of role peer) this member authenticates \
            as to its peers; its secret from --peer-secret-file, or CACHET_PEER_SECRET.
            """
    )
    var peerUser: String?

    @Option(help: "A file whose first line is the --peer-user's secret.")
    var peerSecretFile: String?

    @Option(
        help: """
            Port of the HTTP/1.1 listener, on the node's event loops: /metrics (Prometheus text), \
            /health/live, /health/ready, and /values/KEY with --http-values (0 picks a free one); none by default.
            """
    )
    var httpPort: Int?

    @Option(
        help: """
            Port of the same over TLS (HTTPS) with --tls-cert and --tls-key (0 picks a free one); none by default.
            """
    )
    var httpsPort: Int?

    @Option(help: "Address the HTTP listeners bind (an IPv4 or IPv6 literal or a name). Default: 127.0.0.1.")
    var httpHost = "127.0.0.1"

    @Flag(
        help: """
            Also serve values read-only on the HTTP ports: GET and HEAD /values/KEY (percent-encoded), with \
            byte ranges, for players and browsers; users of --auth-file sign in with HTTP Basic or a bearer \
            token USER:SECRET (header or access_token). Needs --http-port or --https-port; a --tls-only node \
            serves them on --https-port only.
            """
    )
    var httpValues = false

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    func run() throws {
        // Before any I/O queue's thread allocates (see CachetAllocatorSettings).
        CachetAllocatorSettings.applyToProcess()
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError(
                "--log-level '\(logLevel)' is not one of trace, debug, info, notice, warning, error, critical"
            )
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "cachet.node")

        var configuration = CachetNodeConfiguration()
        configuration.host = host ?? configuration.host
        configuration.port = port ?? configuration.port
        configuration.nodeID = nodeId
        configuration.maximumConnections = maxConnections
        configuration.ioQueueCount = ioQueues
        configuration.ioLingerMilliseconds = ioLingerMs
        do throws(CachetNodeError) {
            if let cluster {
                guard let nodeId else {
                    throw CachetNodeError(
                        code: .invalidConfiguration,
                        message: "--cluster \(cluster) needs --node-id: name this node by its id in the file"
                    )
                }
                try configuration.joinCluster(file: cluster, nodeID: nodeId, host: host, port: port)
            }
            configuration.memoryLimit = try CachetByteCount.parse(memoryLimit)
            configuration.maximumPayloadLength = try CachetByteCount.parse(maxFrame)
            configuration.shutdownTimeout = shutdownTimeout
            configuration.clientStallTimeout = clientStallTimeout
            configuration.forwardTimeout = forwardTimeout
            configuration.probeInterval = probeInterval
            configuration.warmUpSeconds = warmUpSeconds
            configuration.holdPeriod = holdPeriod
            configuration.leaseSeconds = leaseTime
            configuration.watchBufferBytes = try CachetByteCount.parse(watchBuffer)
            configuration.watchRetainSeconds = watchRetain
            configuration.watchSendLimit = try CachetByteCount.parse(watchSendLimit)
            configuration.servesOwnKeysInMinority = serveOwnKeysInMinority
            configuration.holdsFullPeriod = holdFullPeriod
            configuration.tlsPort = tlsPort
            configuration.memcachedPort = memcachedPort
            configuration.httpPort = httpPort
            configuration.httpsPort = httpsPort
            configuration.httpHost = httpHost
            configuration.httpValues = httpValues
            configuration.memcachedTLSPort = memcachedTlsPort
            configuration.tlsOnly = tlsOnly
            configuration.authFile = authFile
            if let peerUser {
                let read: [UInt8]?
                do throws(CachetAuthError) {
                    read = try CachetSecretSource.read(file: peerSecretFile, environmentVariable: "CACHET_PEER_SECRET")
                } catch {
                    throw CachetNodeError(code: .invalidConfiguration, message: "--peer-secret-file: \(error.message)")
                }
                guard let secret = read else {
                    throw CachetNodeError(
                        code: .invalidConfiguration,
                        message:
                            "--peer-user \(peerUser) needs its secret: --peer-secret-file FILE or CACHET_PEER_SECRET"
                    )
                }
                configuration.peerCredential = (peerUser, secret)
                configuration.peerSecretFile = peerSecretFile
            }
            configuration.tlsHandshakeTimeout = tlsHandshakeTimeout
            guard let clientAuthentication = CachetTLSConfiguration.ClientAuthentication(rawValue: tlsClientAuth) else {
                throw CachetNodeError(
                    code: .invalidConfiguration,
                    message: "--tls-client-auth '\(tlsClientAuth)' is not one of none, optional, required"
                )
            }
            if tlsCert != nil || tlsKey != nil || tlsCa != nil || clientAuthentication != .none {
                configuration.tls = CachetTLSConfiguration(
                    certificateFile: tlsCert,
                    keyFile: tlsKey,
                    caFile: tlsCa,
                    clientAuthentication: clientAuthentication
                )
            }
            if let connectionMemory {
                configuration.connectionMemoryLimit = try CachetByteCount.parse(connectionMemory)
            }
            let diskBytes = try CachetByteCount.parse(diskLimit)
            configuration.largeValueThreshold = try CachetByteCount.parse(largeValue)
            configuration.memcachedItemSize = try CachetByteCount.parse(memcachedItemSize)
            guard ["member", "cluster"].contains(memcachedFlush) else {
                throw CachetNodeError(
                    code: .invalidConfiguration,
                    message: "--memcached-flush '\(memcachedFlush)' is not one of member, cluster"
                )
            }
            configuration.memcachedFlushesCluster = memcachedFlush == "cluster"
            guard uploadTimeout >= 1 else {
                throw CachetNodeError(
                    code: .invalidConfiguration,
                    message: "--upload-timeout \(uploadTimeout) is below 1 second"
                )
            }
            configuration.uploadIdleSeconds = uploadTimeout
            if let level = compressionLevel, !(0...9).contains(level) {
                throw CachetNodeError(
                    code: .invalidConfiguration,
                    message: "--compression-level \(level) is not between 0 and 9"
                )
            }
            if diskBytes > 0 {
                // --disk-limit is the tier's whole footprint: the journal's files, created at full size, a
                // cluster member's stand-in log at its budget, both sized from it, and the entry files in what
                // they leave.
                let standInLog = configuration.cluster != nil
                guard
                    var disk = CachetDiskConfiguration.sized(
                        footprint: diskBytes,
                        directory: dataDir,
                        standInLog: standInLog
                    )
                else {
                    let minimum = CachetDiskConfiguration.minimumFootprint(standInLog: standInLog)
                    let what = standInLog ? "its journal files and the stand-in log" : "its journal files"
                    throw CachetNodeError(
                        code: .invalidConfiguration,
                        message: "--disk-limit \(diskLimit) is too small for the disk tier: \(what) and the least room "
                            + "for entries take \(minimum) bytes (1MiB will do), or 0 to turn the "
                            + "disk tier off"
                    )
                }
                if let level = compressionLevel { disk.compressionLevel = level }
                configuration.disk = disk
            }
            let server = try CachetNodeServer(configuration: configuration, logger: logger)
            // Catch SIGTERM/SIGINT before announcing the port, so that a signal sent right after the
            // announcement is never lost.
            let signals = CachetTerminationSignals.install()
            let membership = server.membership
            let reload = CachetReloadSignal.install {
                membership.reload(logger: logger)
                server.reloadTLS()
                server.reloadAuth()
            }
            let boundPort = try server.start()
            membership.listening(host: configuration.host, port: boundPort)
            logger.info(
                "cluster membership",
                metadata: [
                    "node.id": "\(membership.nodeID)", "cluster.hash": "\(membership.current.membershipHashText)",
                    "cluster.members": "\(membership.current.members.map(\.description).joined(separator: ", "))",
                    "cluster.file": "\(membership.file ?? "")",
                ]
            )
            // An IPv6 host is bracketed ([::1]:7420), so the port is always what follows the last colon.
            let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
            print("cachet-node listening on \(host):\(boundPort)")
            if let tlsPort = server.tlsPort {
                print("cachet-node listening for TLS on \(host):\(tlsPort)")
            }
            if let memcachedPort = server.memcachedPort {
                print("cachet-node speaking memcached's protocol on \(host):\(memcachedPort)")
            }
            if let memcachedTLSPort = server.memcachedTLSPort {
                print("cachet-node speaking memcached's protocol over TLS on \(host):\(memcachedTLSPort)")
            }
            let httpShown = httpHost.contains(":") ? "[\(httpHost)]" : httpHost
            for (scheme, port) in [("http", server.httpPort), ("https", server.httpsPort)] {
                guard let port else { continue }
                print("cachet-node metrics and health on \(scheme)://\(httpShown):\(port)")
                if httpValues {
                    print("cachet-node values on \(scheme)://\(httpShown):\(port)\(HTTPValueRequest.pathPrefix)KEY")
                }
            }
            fflush(nil)
            server.run(until: signals)
            reload.cancel()
        } catch  where error.code == .invalidConfiguration {
            throw ValidationError(error.description)
        } catch {
            // Not a mistake in the flags (a port or data directory in use, a disk that cannot be opened): the
            // message alone, without the usage, and exit status 1.
            FileHandle.standardError.write(Data("Error: \(error.description)\n".utf8))
            throw ExitCode.failure
        }
    }
}
