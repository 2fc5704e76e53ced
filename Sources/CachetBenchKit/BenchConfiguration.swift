public import CachetIO
import CachetRing

/// What a load run does. Field names follow the `cachet-bench` flags.
public struct BenchConfiguration: Sendable, Hashable {
    /// Servers to load, each named once. With more than one, every key belongs to one of them (its owner
    /// on the consistent-hash ring of their ids, `host:port` unless a cluster file names them, see `Protocol/RING.md`) and is only ever
    /// sent to that one; connections are spread over them evenly.
    public var targets: [BenchTarget] = [BenchTarget(host: "127.0.0.1", port: BenchProtocol.cachet.defaultPort)]
    /// The protocol spoken.
    public var protocolKind: BenchProtocol = .cachet
    /// Points per server on the hash ring, as the cluster file gives it (`virtual_nodes_per_member`).
    public var virtualNodesPerMember = CachetRing.defaultVirtualNodesPerMember
    /// Connections in all, spread over the targets and the threads.
    public var connections = 50
    /// Requests in flight per connection.
    public var pipeline = 1
    /// Distinct keys.
    public var keys = 100_000
    /// Bytes per key wanted: `key:` and a zero-padded index, widened where the largest index needs it.
    public var keySize = 14
    /// Bytes per value.
    public var valueSize = 100
    /// Share of requests that are reads (0 to 1).
    public var getRatio = 0.9
    /// Keys each read asks for (memcached's protocol only: one `get` of that many keys, answered by a
    /// `VALUE` for each and one `END`); 1 is a plain GET.
    public var keysPerGet = 1
    /// Seconds to measure; nil measures until `requests` are done.
    public var duration: Double? = 10
    /// Requests to measure in all; nil measures for `duration`. 0 measures nothing (with `prefill`: a fill).
    public var requests: Int? = nil
    /// Seconds of load before measuring, not counted in the latency or throughput.
    public var warmup: Double = 0
    /// Requests per second in all, sent on a fixed schedule (split evenly over the threads); nil sends
    /// each request as soon as a reply frees its place. A paced request's latency counts from when the
    /// schedule meant to send it, so a server that falls behind is charged for the requests waiting behind
    /// it (no coordinated omission). Prefills are never paced.
    public var rate: Double? = nil
    /// How keys are drawn.
    public var distribution: BenchDistribution = .uniform
    /// Write every key once before measuring, so that every read must hit with the right length.
    public var prefill = false
    /// Load threads, each with its own event loop (a `CachetEventLoop`).
    public var threads = 1
    /// Seed of the key and operation choice.
    public var seed: UInt64 = 42
    /// TLS on every connection (`--tls`): the CA the servers' certificates chain to, a client certificate
    /// if they ask for one, the name their certificates carry; nil: plain TCP. With `--driver client`,
    /// CachetClient's own TLS.
    public var tls: CachetTLSConfiguration? = nil

    /// Creates the default configuration.
    public init() {}

    /// Checks the values, naming the flag at fault.
    /// - Throws: ``BenchError`` with code `invalidConfiguration`.
    public func validate() throws(BenchError) {
        func fail(_ text: String) -> BenchError { BenchError(.invalidConfiguration, text) }
        guard !targets.isEmpty else { throw fail("no server to load: give --host/--port or --cluster") }
        for target in targets where !(1...65535).contains(target.port) {
            throw fail("port \(target.port) of \(target.host) is not between 1 and 65535")
        }
        var named = Set<String>()
        for target in targets where !named.insert(target.description).inserted {
            throw fail("server \(target) is named twice: list every server once")
        }
        var ids = Set<String>()
        for target in targets where !ids.insert(target.id).inserted {
            throw fail("member id \(target.id) is given to two servers: give every server its own id")
        }
        guard connections >= 1 && connections <= 100_000 else {
            throw fail("--connections must be between 1 and 100000")
        }
        guard pipeline >= 1 && pipeline <= 4096 else { throw fail("--pipeline must be between 1 and 4096") }
        guard keys >= 1 && keys <= 100_000_000 else { throw fail("--keys must be between 1 and 100000000") }
        guard keySize >= 1 && keySize <= 250 else {
            throw fail("--key-size must be between 1 and 250 (memcached's limit)")
        }
        guard valueSize >= 0 && valueSize <= 512 << 20 else {
            throw fail("--value-size must be between 0 and 536870912 (512 MiB)")
        }
        guard getRatio.isFinite && (0...1).contains(getRatio) else { throw fail("--get-ratio must be between 0 and 1") }
        guard (1...100).contains(keysPerGet) else { throw fail("--keys-per-get must be between 1 and 100") }
        guard keysPerGet == 1 || protocolKind == .memcache else {
            throw fail("--keys-per-get above 1 needs --protocol memcache (a get of several keys)")
        }
        guard threads >= 1 && threads <= 256 else { throw fail("--threads must be between 1 and 256") }
        guard connections >= threads * targets.count else {
            throw fail(
                "--connections \(connections) is fewer than --threads \(threads) x \(targets.count) server(s): "
                    + "every thread needs a connection to every server"
            )
        }
        guard duration != nil || requests != nil else { throw fail("give --duration or --requests") }
        if let duration, !(duration.isFinite && duration > 0 && duration <= 86_400) {
            throw fail("--duration must be more than 0 and at most 86400 seconds")
        }
        if let requests, requests < 0 { throw fail("--requests must not be negative") }
        guard warmup.isFinite && warmup >= 0 && warmup <= 3_600 else {
            throw fail("--warmup must be between 0 and 3600 seconds")
        }
        if let rate, !(rate.isFinite && rate >= 1 && rate <= 100_000_000) {
            throw fail("--rate must be between 1 and 100000000 requests per second")
        }
    }

    /// Digits of the zero-padded index in every key.
    public var keyDigits: Int { max(keySize - 4, decimalLength(max(keys - 1, 0))) }

    /// Bytes of every key: all keys have the same length.
    public var keyLength: Int { 4 + keyDigits }

    /// The bytes of key `index`: `key:` and the index, zero-padded to ``keyDigits``.
    /// - Parameter index: the key's index.
    /// - Returns: the key.
    public func key(_ index: Int) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: keyLength) { buffer, count in
            count = BenchConfiguration.writeKey(
                index,
                digits: keyDigits,
                to: UnsafeMutableRawPointer(buffer.baseAddress!)
            )
        }
    }

    /// Writes `key:` and `index` zero-padded to `digits` digits; returns the bytes written.
    @inline(__always)
    static func writeKey(_ index: Int, digits: Int, to destination: UnsafeMutableRawPointer) -> Int {
        destination.storeBytes(of: UInt32(0x3a79_656b).littleEndian, as: UInt32.self)  // "key:"
        var remaining = index
        var position = 4 + digits - 1
        while position >= 4 {
            destination.storeBytes(of: UInt8(0x30 + remaining % 10), toByteOffset: position, as: UInt8.self)
            remaining /= 10
            position -= 1
        }
        return 4 + digits
    }
}
