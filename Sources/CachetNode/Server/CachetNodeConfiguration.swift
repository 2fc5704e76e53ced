public import CachetIO
public import CachetStore
import CachetWire

/// Everything a node needs to know to start. The defaults are the `cachet-node` flags' defaults.
public struct CachetNodeConfiguration: Sendable {
    /// The address to listen on (`--host`): an IPv4 or IPv6 literal (`0.0.0.0`, `::`, `::1`) or a host name.
    public var host: String = "127.0.0.1"
    /// The TCP port (`--port`); 0 picks a free one.
    public var port: Int = 7420
    /// Bytes the memory tier may hold, overhead included (`--memory-limit`).
    public var memoryLimit: Int = 256 << 20
    /// The largest payload a frame may carry (`--max-frame`).
    public var maximumPayloadLength: Int = CachetProtocol.defaultMaximumPayloadLength
    /// Connections served at once (`--max-connections`); more are answered UNAVAILABLE and closed.
    public var maximumConnections: Int = 10_000
    /// Serial I/O queues, each with its own epoll set (`--io-queues`).
    public var ioQueueCount: Int = CachetNodeConfiguration.defaultIOQueueCount
    /// Milliseconds an I/O queue that has just served requests keeps waiting for the next ones on its own
    /// thread (`--io-linger-ms`) before handing the epoll set back to its Dispatch source; 0 hands it back
    /// at once. See `NodeIOQueue`.
    public var ioLingerMilliseconds: Int = 2
    /// Pending reply bytes per connection above which the node stops reading that connection's requests.
    public var outputHighWatermark: Int = 4 << 20
    /// Bytes all connections together may hold in buffers and in large PUT values still arriving
    /// (`--connection-memory`); `nil` takes ``defaultConnectionMemoryLimit``. See `ConnectionMemory`.
    public var connectionMemoryLimit: Int? = nil
    /// Seconds a connection may hold part of the connection memory without progress (its replies not
    /// read, its request not finished) while other connections wait for that memory, before it is closed
    /// (`--client-stall-timeout`); 0 never closes one. See `ConnectionUpkeep.evictStalledConnections`.
    public var clientStallTimeout: Double = 3
    /// Seconds a request forwarded to the member that owns its key may take, the connect included, before
    /// the client is answered UNAVAILABLE (`--forward-timeout`). See `Protocol/CLUSTER.md`, "Forwarding".
    public var forwardTimeout: Double = 1
    /// Seconds between the PING probes a node sends each peer it takes for up (`--probe-interval`); a peer
    /// marked down is probed on its own backoff (250 ms doubling to 5 s). See `Protocol/CLUSTER.md`, "Health".
    public var probeInterval: Double = 1
    /// Seconds a node of a cluster of more than one answers GETs of its own keys with a miss after it may
    /// have been away (`--hold-period`); nil takes twice the longest probe backoff (5 × `probeInterval`) plus
    /// `forwardTimeout`, 11 s by default; 0 turns the hold off. See `Protocol/CLUSTER.md`, "The owner's hold".
    public var holdPeriod: Double? = nil
    /// Seconds a read-through lease stands (`--lease-time`, `Protocol/PROTOCOL.md`, "Leases"): how long the
    /// callers that miss a key wait for the one loading it before another may load it.
    public var leaseSeconds: Double = 10
    /// Bytes of recent changes kept for WATCH (`--watch-buffer`): what a watcher that falls behind or
    /// reconnects can still be sent before it is told it missed some (a GAP).
    public var watchBufferBytes: Int = 16 << 20
    /// Seconds a watched prefix stays recorded after its last watcher leaves (`--watch-retain`), so that a
    /// watcher that reconnects within it resumes without a GAP.
    public var watchRetainSeconds: Double = 60
    /// Bytes a watcher may have queued for sending (`--watch-send-limit`); past it, it waits for its peer.
    public var watchSendLimit: Int = 1 << 20
    /// Whether a node of a cluster of more than one goes on serving its own keys while it reaches fewer than
    /// a majority of the members (`--serve-own-keys-in-minority`). Off by default: such a node holds its
    /// keys, since it may be cut off while another member stands in for them; on gives up the guarantee that
    /// no GET returns a value a stand-in replaced, across partitions. See `Protocol/CLUSTER.md`, "The
    /// minority rule".
    public var servesOwnKeysInMinority: Bool = false
    /// Whether a member back from an absence holds for the whole hold period (and its extensions) even once
    /// every peer has cleared it (`--hold-full-period`). Off by default: the hold ends as soon as every peer
    /// routes the member's keys to it and owes it nothing, at the earliest a quiet period after it started.
    /// See `Protocol/CLUSTER.md`, "The owner's hold".
    public var holdsFullPeriod: Bool = false
    /// Seconds after a membership change during which a member answers a miss of a key it did not own before
    /// by asking the key's previous owner (`--warm-up-seconds`); 0 turns warm-up off. See
    /// `Protocol/CLUSTER.md`, "Warm-up after a membership change".
    public var warmUpSeconds: Double = 300
    /// Seconds a shutdown may take to answer the requests already received and close the connections
    /// (`--shutdown-timeout`); queued disk writes are finished after that.
    public var shutdownTimeout: Double = 10
    /// The TLS listener's port (`--tls-port`, beside the plain `--port`); nil: no TLS listener. 0 picks a
    /// free port.
    public var tlsPort: Int? = nil
    /// The memcached port (`--memcached-port`, `docs/memcached.md`): memcached's text protocol on the same
    /// loops, store and cluster; nil: none. 0 picks a free port.
    public var memcachedPort: Int? = nil
    /// memcached's text protocol over TLS (`--memcached-tls-port`, as `memcached -Z`), with ``tls``'s files;
    /// nil: none. 0 picks a free port.
    public var memcachedTLSPort: Int? = nil
    /// The longest value a memcached client may store (`--memcached-item-size`, memcached's `-I`); 1 MiB, as
    /// memcached's default. Items are held in memory: at most `--large-value`.
    public var memcachedItemSize: Int = 1 << 20
    /// The HTTP port (`--http-port`, `docs/node.md`, "The HTTP port"): `/metrics`, `/health/live`,
    /// `/health/ready` and, with ``httpValues``, `/values/KEY`, served on the node's event loops; nil (the
    /// default) for none.
    public var httpPort: Int? = nil
    /// The same over TLS (`--https-port`), with ``tls``'s files; nil for none.
    public var httpsPort: Int? = nil
    /// The address the HTTP ports listen on (`--http-host`): the loopback address unless given, as metrics
    /// and health are usually read on the same machine.
    public var httpHost: String = "127.0.0.1"
    /// Whether the HTTP ports serve values read-only under `/values/` (`--http-values`).
    public var httpValues = false
    /// Whether memcached's `flush_all` (without a delay) empties every member of the cluster
    /// (`--memcached-flush cluster`) rather than this one (`member`, the default).
    public var memcachedFlushesCluster = false
    /// The TLS listener's certificate, key, CA and client authentication (`--tls-cert`, `--tls-key`,
    /// `--tls-ca`, `--tls-client-auth`); needed with ``tlsPort``. Re-read on SIGHUP.
    public var tls: CachetTLSConfiguration? = nil
    /// Whether the node's one port (`--port`, the cluster file's) speaks TLS only (`--tls-only`), with
    /// ``tls``'s files; in a cluster, the node then reaches its peers over TLS too, presenting its own
    /// certificate to them and checking theirs against ``tls``'s CA (mutual TLS when every member runs
    /// with `--tls-client-auth required`).
    public var tlsOnly: Bool = false
    /// Seconds a TLS connection may take to finish its handshake before it is closed
    /// (`--tls-handshake-timeout`).
    public var tlsHandshakeTimeout: Double = 5
    /// The auth file (`--auth-file`, `docs/security.md`): its users must AUTH before any other request,
    /// and may then do what their role and key prefixes allow. Nil: every client may send every request.
    /// Re-read on SIGHUP. A cluster member with one authenticates to its peers with ``peerCredential``.
    public var authFile: String? = nil
    /// The user (of role `peer` in the members' auth files) and secret this member authenticates as to
    /// its peers (`--peer-user`, with `--peer-secret-file` or `CACHET_PEER_SECRET`); needed in a cluster
    /// whose members have an auth file.
    public var peerCredential: (user: String, secret: [UInt8])? = nil
    /// The file ``peerCredential``'s secret was read from (`--peer-secret-file`), read again on SIGHUP;
    /// nil when it came from `CACHET_PEER_SECRET`.
    public var peerSecretFile: String? = nil
    /// Shards of the memory tier, each with its own lock.
    public var memoryShardCount: Int = 16
    /// The disk tier (`--data-dir`, `--disk-limit`, `--compression-level`); `nil` keeps entries in memory only.
    public var disk: CachetDiskConfiguration? = nil
    /// Values longer than this (`--large-value`) are kept on the disk tier only, never whole in memory: a
    /// PUT of one is written to disk alone, a read of one is not kept in memory. A node without a disk tier
    /// refuses them (TOO_LARGE).
    public var largeValueThreshold: Int = 8 << 20
    /// Seconds an upload (a PUT in parts) may go without a part before it is given up (`--upload-timeout`).
    public var uploadIdleSeconds: Int = 30
    /// Seconds between sweeps of expired entries.
    public var sweepInterval: Double = 1
    /// Entries per shard examined by one sweep.
    public var sweepBudget: Int = 1000
    /// This node's id in its cluster (`--node-id`); `nil` without a cluster names a cluster of one `HOST:PORT`.
    public var nodeID: String? = nil
    /// The cluster (`--cluster`, see ``joinCluster(file:nodeID:host:port:)``); `nil` makes a cluster of one.
    public var cluster: CachetNodeCluster? = nil

    /// Creates a configuration with the defaults.
    public init() {}

    /// One I/O queue per core, less one on machines with more than two cores to leave room for the
    /// disk queue and the system (on two cores one queue beat two with the load on the same box:
    /// BENCHMARKS.md, "Figures behind choices in the code").
    public static var defaultIOQueueCount: Int {
        let cores = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        if cores <= 2 { return 1 }
        return cores - 1
    }

    /// The connection memory budget in effect: the flag's value, or a quarter of `--memory-limit`, and
    /// never less than the largest frame plus 16 MiB, so that a request or reply of the largest size can
    /// always be held once other connections have returned their memory.
    public var effectiveConnectionMemoryLimit: Int {
        connectionMemoryLimit ?? max(memoryLimit / 4, maximumPayloadLength + (16 << 20))
    }

    /// Checks every value's range.
    /// - Throws: ``CachetNodeError`` `invalidConfiguration` naming the flag at fault.
    public func validate() throws(CachetNodeError) {
        func fail(_ message: String) -> CachetNodeError {
            CachetNodeError(code: .invalidConfiguration, message: message)
        }
        guard (0...65535).contains(port) else { throw fail("--port \(port) is not between 0 and 65535") }
        guard memoryLimit >= 1 << 20 else { throw fail("--memory-limit \(memoryLimit) is below the 1 MiB minimum") }
        guard maximumPayloadLength >= 1024 && maximumPayloadLength <= Int(UInt32.max) else {
            throw fail("--max-frame \(maximumPayloadLength) must be between 1 KiB and 4 GiB - 1")
        }
        guard maximumConnections >= 1 else { throw fail("--max-connections must be at least 1") }
        guard (1...64).contains(ioQueueCount) else {
            throw fail("--io-queues \(ioQueueCount) must be between 1 and 64")
        }
        guard (0...1000).contains(ioLingerMilliseconds) else {
            throw fail("--io-linger-ms \(ioLingerMilliseconds) must be between 0 and 1000")
        }
        if let limit = connectionMemoryLimit, limit < maximumPayloadLength + (1 << 20) {
            throw fail(
                "--connection-memory \(limit) is below --max-frame \(maximumPayloadLength) + 1 MiB: a frame of the "
                    + "largest size could never be received; raise it or lower --max-frame"
            )
        }
        guard clientStallTimeout >= 0 && clientStallTimeout <= 3600 else {
            throw fail(
                "--client-stall-timeout \(clientStallTimeout) must be between 0 (never close a stalled client) "
                    + "and 3600 seconds"
            )
        }
        guard forwardTimeout >= 0.001 && forwardTimeout <= 600 else {
            throw fail("--forward-timeout \(forwardTimeout) must be between 0.001 and 600 seconds")
        }
        guard warmUpSeconds >= 0 && warmUpSeconds <= 86400 else {
            throw fail("--warm-up-seconds \(warmUpSeconds) must be between 0 and 86400 seconds")
        }
        guard probeInterval >= 0.01 && probeInterval <= 3600 else {
            throw fail("--probe-interval \(probeInterval) must be between 0.01 and 3600 seconds")
        }
        if !(watchBufferBytes >= 64 << 10 && watchBufferBytes <= 1 << 34) {
            throw fail("--watch-buffer \(watchBufferBytes) must be between 64KiB and 16GiB")
        }
        if !(watchRetainSeconds >= 0 && watchRetainSeconds <= 86_400) {
            throw fail("--watch-retain \(watchRetainSeconds) must be between 0 and 86400 seconds")
        }
        if !(watchSendLimit >= 64 << 10 && watchSendLimit <= 1 << 30) {
            throw fail("--watch-send-limit \(watchSendLimit) must be between 64KiB and 1GiB")
        }
        if !(leaseSeconds >= 0.1 && leaseSeconds <= 3600) {
            throw fail("--lease-time \(leaseSeconds) must be between 0.1 and 3600 seconds")
        }
        if let holdPeriod, !(holdPeriod >= 0 && holdPeriod <= 3600) {
            throw fail("--hold-period \(holdPeriod) must be between 0 (no hold) and 3600 seconds")
        }
        guard shutdownTimeout > 0 && shutdownTimeout <= 3600 else {
            throw fail("--shutdown-timeout \(shutdownTimeout) must be above 0 and at most 3600 seconds")
        }
        let tlsPorts = tlsPort != nil || tlsOnly || memcachedTLSPort != nil || httpsPort != nil
        if tlsPorts && tls?.certificateFile == nil {
            throw fail(
                "--tls-port, --tls-only, --memcached-tls-port and --https-port need --tls-cert and --tls-key (PEM files)"
            )
        }
        if !tlsPorts && tls != nil {
            throw fail(
                "--tls-cert, --tls-key, --tls-ca and --tls-client-auth need --tls-port, --tls-only, "
                    + "--memcached-tls-port or --https-port"
            )
        }
        for (flag, value) in [("--http-port", httpPort), ("--https-port", httpsPort)] {
            if let value, !(0...65535).contains(value) { throw fail("\(flag) \(value) must be a port from 0 to 65535") }
        }
        if let httpPort, let httpsPort, httpPort != 0, httpPort == httpsPort {
            throw fail("--http-port and --https-port must differ")
        }
        if httpValues && httpPort == nil && httpsPort == nil {
            throw fail("--http-values serves on --http-port or --https-port: give one")
        }
        if let memcachedTLSPort, !(0...65535).contains(memcachedTLSPort) {
            throw fail("--memcached-tls-port \(memcachedTLSPort) must be a port from 0 to 65535")
        }
        if tlsOnly && tlsPort != nil {
            throw fail("--tls-only makes --port speak TLS: leave out --tls-port")
        }
        if tlsOnly && cluster != nil && tls?.caFile == nil {
            throw fail("a cluster member with --tls-only checks its peers' certificates: give --tls-ca")
        }
        guard (1024...(1 << 30)).contains(memcachedItemSize) else {
            throw fail("--memcached-item-size \(memcachedItemSize) must be between 1 KiB and 1 GiB")
        }
        if let memcachedPort,
            !(0...65535).contains(memcachedPort)
                || (memcachedPort != 0 && (memcachedPort == port || memcachedPort == tlsPort))
        {
            throw fail(
                "--memcached-port \(memcachedPort) must be a port from 0 to 65535 other than --port and --tls-port"
            )
        }
        if let tlsPort, !(0...65535).contains(tlsPort) || (tlsPort != 0 && tlsPort == port) {
            throw fail("--tls-port \(tlsPort) must be a port from 0 to 65535 other than --port")
        }
        if authFile != nil && cluster != nil && peerCredential == nil {
            throw fail(
                "a cluster member with --auth-file authenticates to its peers: give --peer-user (a user of role "
                    + "peer) and its secret (--peer-secret-file or CACHET_PEER_SECRET)"
            )
        }
        guard tlsHandshakeTimeout > 0 && tlsHandshakeTimeout <= 600 else {
            throw fail("--tls-handshake-timeout \(tlsHandshakeTimeout) must be above 0 and at most 600 seconds")
        }
        guard memoryShardCount > 0 && memoryShardCount & (memoryShardCount - 1) == 0 else {
            throw fail("memory shard count \(memoryShardCount) must be a power of two")
        }
        try validateCluster()
    }
}

#if canImport(Glibc)
import Glibc
#endif
