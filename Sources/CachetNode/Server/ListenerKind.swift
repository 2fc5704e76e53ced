import CachetIO
import CachetMemcache
import CachetWire

/// What a listening socket of the node serves (`docs/node.md`, "Ports"). Every listener accepts on the
/// first I/O loop, which hands each connection to a loop, round robin: every protocol is served on the same
/// loops, by the same command layer.
enum ListenerKind: Hashable, Sendable, CaseIterable {
    /// The binary protocol (`--port`; TLS with `--tls-only`).
    case native
    /// The binary protocol over TLS (`--tls-port`).
    case nativeTLS
    /// memcached's text protocol (`--memcached-port`).
    case memcache
    /// memcached's text protocol over TLS (`--memcached-tls-port`).
    case memcacheTLS
    /// HTTP/1.1: metrics, health and values (`--http-port`).
    case http
    /// The same over TLS (`--https-port`).
    case https

    /// Whether its connections speak TLS (the native port's depends on `--tls-only`).
    var usesTLS: Bool {
        switch self {
        case .nativeTLS, .memcacheTLS, .https: return true
        case .native, .memcache, .http: return false
        }
    }

    /// The flag that sets its port.
    var flag: String {
        switch self {
        case .native: return "--port"
        case .nativeTLS: return "--tls-port"
        case .memcache: return "--memcached-port"
        case .memcacheTLS: return "--memcached-tls-port"
        case .http: return "--http-port"
        case .https: return "--https-port"
        }
    }

    /// The host and port it listens on, if `configuration` asks for it.
    func address(in configuration: CachetNodeConfiguration) -> (host: String, port: Int)? {
        switch self {
        case .native: return (configuration.host, configuration.port)
        case .nativeTLS: return configuration.tlsPort.map { (configuration.host, $0) }
        case .memcache: return configuration.memcachedPort.map { (configuration.host, $0) }
        case .memcacheTLS: return configuration.memcachedTLSPort.map { (configuration.host, $0) }
        case .http: return configuration.httpPort.map { (configuration.httpHost, $0) }
        case .https: return configuration.httpsPort.map { (configuration.httpHost, $0) }
        }
    }

    /// What its connections speak, and the settings their sessions share.
    func language(
        in configuration: CachetNodeConfiguration,
        requiresAuth: Bool,
        statistics: NodeStatistics
    ) -> ConnectionLanguage {
        switch self {
        case .native, .nativeTLS:
            return .native
        case .memcache, .memcacheTLS:
            // memcached's item limit: a frame, and at most `--large-value`, as items are held in memory.
            let frame =
                configuration.maximumPayloadLength - CachetProtocol.headerSize - CachetProtocol.putBodyPrefixSize
                - MemcacheTextDecoder.maximumKeyLength - CachetItemWrite.headerSize
            return .memcache(
                MemcacheSession.Settings(
                    version: CachetNodeServer.memcacheVersion,
                    requiresAuth: requiresAuth,
                    flushesCluster: configuration.memcachedFlushesCluster,
                    maximumValueLength: min(
                        configuration.memcachedItemSize,
                        min(frame, configuration.largeValueThreshold)
                    )
                )
            )
        case .http, .https:
            return .http(
                HTTPSession.Settings(
                    servesValues: configuration.httpValues,
                    valuesNeedTLS: configuration.tlsOnly,
                    requiresAuth: requiresAuth,
                    // What one range reply carries: the frame less its header, the value's length and its tag.
                    pieceSize: min(
                        1 << 20,
                        configuration.maximumPayloadLength - CachetProtocol.headerSize
                            - CachetValueRange.replyPrefixSize
                    ),
                    metrics: { statistics.prometheusText() },
                    readiness: { statistics.readiness() },
                    responses: statistics.httpResponses
                )
            )
        }
    }

    /// A bound listening socket.
    struct Bound {
        let kind: ListenerKind
        let fd: Int32
        let port: Int
    }

    /// Binds every listener `configuration` asks for, the native port last (as clients take a bound native
    /// port to mean the node is up); on a failure, closes those already bound.
    /// - Throws: ``CachetNodeError`` `addressUnusable`, naming the flag whose address cannot be bound.
    static func bindAll(_ configuration: CachetNodeConfiguration) throws(CachetNodeError) -> [Bound] {
        var bound: [Bound] = []
        for kind in [ListenerKind.nativeTLS, .memcache, .memcacheTLS, .http, .https, .native] {
            guard let (host, port) = kind.address(in: configuration) else { continue }
            do throws(CachetIOError) {
                let (fd, boundPort) = try CachetSocket.listen(on: CachetAddress(host: host, port: port))
                bound.append(Bound(kind: kind, fd: fd, port: boundPort))
            } catch {
                for socket in bound { CachetSocket.close(socket.fd) }
                let hostFlag = kind == .http || kind == .https ? "--http-host" : "--host"
                throw CachetNodeError(
                    code: .addressUnusable,
                    message: "cannot listen on \(hostFlag) \(host) \(kind.flag) \(port): \(error.message)"
                )
            }
        }
        return bound
    }
}
