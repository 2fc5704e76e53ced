/// What a load run does. Field names follow the `cachet-bench` flags.
public struct BenchConfiguration: Sendable {
    /// Servers to load, as host and port; keys are spread over them by index.
    public var targets: [(host: String, port: Int)] = [("127.0.0.1", 7420)]
    /// The protocol spoken.
    public var protocolKind: BenchProtocol = .cachet
    /// Connections in all, spread over the threads.
    public var connections = 50
    /// Requests in flight per connection.
    public var pipeline = 1
    /// Distinct keys.
    public var keys = 100_000
    /// Bytes per key (`key:` and a zero-padded index; at least wide enough for the index).
    public var keySize = 14
    /// Bytes per value.
    public var valueSize = 100
    /// Share of requests that are reads (0 to 1).
    public var getRatio = 0.9
    /// Seconds to run; nil runs until `requests` are done.
    public var duration: Double? = 10
    /// Requests to send in all; nil runs for `duration`.
    public var requests: Int? = nil
    /// How keys are drawn.
    public var distribution: BenchDistribution = .uniform
    /// Write every key once before measuring, so that every read must hit.
    public var prefill = false
    /// Load threads, each with its own epoll loop.
    public var threads = 1
    /// Seed of the key and operation choice.
    public var seed: UInt64 = 42

    /// Creates the default configuration.
    public init() {}

    /// Checks the values, naming the flag at fault.
    /// - Throws: ``BenchError``.
    public func validate() throws(BenchError) {
        func fail(_ text: String) -> BenchError { BenchError(message: text) }
        guard !targets.isEmpty else { throw fail("no server to load: give --host/--port or --cluster") }
        guard connections >= 1 else { throw fail("--connections must be at least 1") }
        guard pipeline >= 1 && pipeline <= 4096 else { throw fail("--pipeline must be between 1 and 4096") }
        guard keys >= 1 else { throw fail("--keys must be at least 1") }
        guard valueSize >= 0 && valueSize <= 512 << 20 else { throw fail("--value-size must be between 0 and 512 MiB") }
        guard (0...1).contains(getRatio) else { throw fail("--get-ratio must be between 0 and 1") }
        guard threads >= 1 && threads <= connections else {
            throw fail("--threads must be between 1 and --connections")
        }
        guard duration != nil || requests != nil else { throw fail("give --duration or --requests") }
        if let duration, duration <= 0 { throw fail("--duration must be positive") }
        if let requests, requests < 0 { throw fail("--requests must not be negative") }
    }

    /// The bytes of key `index`: `key:` followed by the index, zero-padded to `keySize`.
    /// - Parameter index: the key's index.
    /// - Returns: the key.
    public func key(_ index: Int) -> [UInt8] {
        let digits = String(index)
        let width = max(keySize - 4, digits.utf8.count)
        return Array(("key:" + String(repeating: "0", count: width - digits.utf8.count) + digits).utf8)
    }
}
