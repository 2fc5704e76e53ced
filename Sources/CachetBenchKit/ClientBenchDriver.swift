import CachetClient
import CachetLocking
import Dispatch
import Histogram

#if canImport(Glibc)
import Glibc
#endif

/// What a `--driver client` run measured.
public struct ClientBenchReport: Sendable, Equatable {
    /// Tasks sharing the one client.
    public var tasks: Int
    /// Requests measured.
    public var requests: Int
    /// Seconds measured.
    public var seconds: Double
    /// Requests per second.
    public var opsPerSecond: Double
    /// Latency percentiles in microseconds: p50, p99, p99.9.
    public var p50: Double
    /// The 99th percentile in microseconds.
    public var p99: Double
    /// The 99.9th percentile in microseconds.
    public var p999: Double
    /// Requests that failed.
    public var errors: Int
    /// GETs whose value did not have the expected length (with prefill).
    public var verificationErrors: Int

    /// One line for people.
    public var summary: String {
        func format(_ value: Double) -> String { String(Int(value.rounded())) }
        return "client driver: \(tasks) tasks, \(requests) requests in \(String(format: value(seconds))) s: "
            + "\(format(opsPerSecond)) ops/s, p50 \(format(p50)) µs, p99 \(format(p99)) µs, "
            + "p99.9 \(format(p999)) µs, \(errors) errors, \(verificationErrors) verification errors"
    }

    /// One JSON object.
    public var json: String {
        "{\"driver\":\"client\",\"tasks\":\(tasks),\"requests\":\(requests),\"seconds\":\(seconds),"
            + "\"ops_per_second\":\(opsPerSecond),\"latency_us\":{\"p50\":\(p50),\"p99\":\(p99),\"p999\":\(p999)},"
            + "\"errors\":\(errors),\"verification_errors\":\(verificationErrors)}"
    }

    private func value(_ seconds: Double) -> String { String(Double(Int(seconds * 100)) / 100) }
}

/// The `--driver client` load: `connections` tasks share one ``CachetClient`` (the library's pooled,
/// multiplexed connections), each doing one request at a time, so that the library's overhead can be
/// compared with the raw driver's (which owns one connection per simulated client). Keys, values, the
/// GET share, prefill and duration follow the ``BenchConfiguration``; `pipeline`, `threads` and `rate`
/// do not apply.
public enum ClientBenchDriver {
    /// Runs the load and reports.
    /// - Parameters:
    ///   - configuration: what to run; `connections` is the number of tasks.
    ///   - connectionsPerNode: the client's pool size per node.
    ///   - linger: the client's event loop linger.
    /// - Returns: the measurements.
    /// - Throws: ``BenchError`` when the client cannot be created or the prefill fails.
    public static func run(
        _ configuration: BenchConfiguration,
        connectionsPerNode: Int = 2,
        linger: Duration = .microseconds(500)
    ) throws(BenchError) -> ClientBenchReport {
        try waitForTask { () async throws(BenchError) in
            try await runAsync(configuration, connectionsPerNode: connectionsPerNode, linger: linger)
        }
    }

    static func runAsync(
        _ configuration: BenchConfiguration,
        connectionsPerNode: Int,
        linger: Duration
    ) async throws(BenchError) -> ClientBenchReport {
        var clientConfiguration = CachetClient.Configuration(
            nodes: configuration.targets.map { CachetClient.Node(host: $0.host, port: $0.port, id: $0.id) }
        )
        clientConfiguration.connectionsPerNode = connectionsPerNode
        clientConfiguration.eventLoopLinger = linger
        clientConfiguration.requestTimeout = .seconds(5)
        clientConfiguration.connectTimeout = .seconds(5)
        clientConfiguration.tls = configuration.tls
        let client: CachetClient
        do {
            client = try CachetClient(configuration: clientConfiguration)
        } catch {
            throw BenchError(.invalidConfiguration, error.description)
        }
        let keys = (0..<configuration.keys).map { configuration.key($0) }
        let value = (0..<configuration.valueSize).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 1) }
        if configuration.prefill {
            var start = 0
            while start < keys.count {
                let end = min(keys.count, start + 1000)
                do {
                    try await client.put(keys[start..<end].map { (key: $0, value: value) })
                } catch {
                    await client.shutdown()
                    throw BenchError(.connectionFailed, "prefill failed: \(error)")
                }
                start = end
            }
        }
        let chooser = KeyChooser(count: configuration.keys, distribution: configuration.distribution)
        let tasks = configuration.connections
        let perTask = configuration.requests.map { max(1, $0 / tasks) }
        let warmupEnd = monotonic() + UInt64(configuration.warmup * 1e9)
        let measureSeconds = configuration.duration ?? 3600
        let getThreshold = UInt64(configuration.getRatio * Double(UInt64.max >> 11)) << 11
        let prefill = configuration.prefill
        let valueSize = configuration.valueSize

        struct TaskResult: Sendable {
            var histogram: Histogram<UInt64>
            var requests: Int
            var errors: Int
            var verificationErrors: Int
            var start: UInt64
            var end: UInt64
        }
        let results = await withTaskGroup(of: TaskResult.self) { group in
            for task in 0..<tasks {
                group.addTask {
                    var random = BenchRandom(seed: configuration.seed &+ UInt64(task) &* 0x9E37_79B9)
                    var histogram = makeLatencyHistogram()
                    var result = TaskResult(
                        histogram: histogram,
                        requests: 0,
                        errors: 0,
                        verificationErrors: 0,
                        start: 0,
                        end: 0
                    )
                    // Warm up, then measure.
                    while monotonic() < warmupEnd {
                        _ = try? await client.get(keys[chooser.next(&random)])
                    }
                    let start = monotonic()
                    let end = start + UInt64(measureSeconds * 1e9)
                    var done = 0
                    while true {
                        if let perTask {
                            if done >= perTask { break }
                        } else if done & 15 == 0 && monotonic() >= end {
                            break
                        }
                        let key = keys[chooser.next(&random)]
                        let isGet = random.next() < getThreshold
                        let began = monotonic()
                        do {
                            if isGet {
                                let got = try await client.get(key)
                                if prefill && got?.count != valueSize { result.verificationErrors += 1 }
                            } else {
                                try await client.put(key, value: value)
                            }
                        } catch {
                            result.errors += 1
                        }
                        histogram.record(monotonic() - began)
                        done += 1
                    }
                    result.histogram = histogram
                    result.requests = done
                    result.start = start
                    result.end = monotonic()
                    return result
                }
            }
            var all: [TaskResult] = []
            for await result in group { all.append(result) }
            return all
        }
        await client.shutdown()
        var histogram = makeLatencyHistogram()
        var requests = 0
        var errors = 0
        var verificationErrors = 0
        var first = UInt64.max
        var last: UInt64 = 0
        for result in results {
            histogram.add(result.histogram)
            requests += result.requests
            errors += result.errors
            verificationErrors += result.verificationErrors
            first = min(first, result.start)
            last = max(last, result.end)
        }
        let seconds = Double(last &- first) / 1e9
        func micros(_ percentile: Double) -> Double {
            histogram.totalCount == 0 ? 0 : Double(histogram.valueAtPercentile(percentile)) / 1000
        }
        return ClientBenchReport(
            tasks: tasks,
            requests: requests,
            seconds: seconds,
            opsPerSecond: seconds > 0 ? Double(requests) / seconds : 0,
            p50: micros(50),
            p99: micros(99),
            p999: micros(99.9),
            errors: errors,
            verificationErrors: verificationErrors
        )
    }

    @inline(__always)
    static func monotonic() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}

/// Runs `body` in a task and blocks the calling thread (the command's, not the task pool's) until it ends.
func waitForTask<T: Sendable>(_ body: @escaping @Sendable () async throws(BenchError) -> T) throws(BenchError) -> T {
    let result = CachetLock<Result<T, BenchError>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        let outcome: Result<T, BenchError>
        do throws(BenchError) {
            outcome = .success(try await body())
        } catch {
            outcome = .failure(error)
        }
        result.withLock { $0 = outcome }
        done.signal()
    }
    done.wait()
    return try result.withLock { $0! }.get()
}
