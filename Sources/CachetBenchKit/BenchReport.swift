import Foundation

/// What a run measured. Its JSON form (``json``) is the machine interface of `cachet-bench --json`:
/// snake_case keys, latencies in microseconds.
public struct BenchReport: Codable, Sendable, Equatable {
    /// Latency percentiles in microseconds (reply received minus request sent).
    public struct Latency: Codable, Sendable, Equatable {
        /// Median.
        public var p50: Double
        /// 99th percentile.
        public var p99: Double
        /// 99.9th percentile.
        public var p999: Double
        /// Largest.
        public var max: Double
        /// Mean.
        public var mean: Double
    }

    /// The run's settings.
    public struct Settings: Codable, Sendable, Equatable {
        /// Connections in all.
        public var connections: Int
        /// Requests in flight per connection.
        public var pipeline: Int
        /// Load threads.
        public var threads: Int
        /// Distinct keys.
        public var keys: Int
        /// Bytes per key.
        public var keySize: Int
        /// Bytes per value.
        public var valueSize: Int
        /// Share of reads.
        public var getRatio: Double
        /// Keys each read asks for.
        public var keysPerGet: Int = 1
        /// `uniform` or `zipf`.
        public var distribution: String
        /// Whether every key was written before measuring.
        public var prefill: Bool
        /// Seconds of unmeasured load before measuring.
        public var warmupSeconds: Double
        /// Requests per second the run was paced at, if it was.
        public var rate: Double?
        /// Seconds asked for, if any.
        public var durationSeconds: Double?
        /// Requests asked for, if any.
        public var requests: Int?
        /// Random seed.
        public var seed: UInt64

        enum CodingKeys: String, CodingKey {
            case connections, pipeline, threads, keys, distribution, prefill, requests, seed, rate
            case keySize = "key_size"
            case valueSize = "value_size"
            case getRatio = "get_ratio"
            case keysPerGet = "keys_per_get"
            case warmupSeconds = "warmup_seconds"
            case durationSeconds = "duration_seconds"
        }
    }

    /// The prefill phase: every key written once.
    public struct Prefill: Codable, Sendable, Equatable {
        /// Writes acknowledged.
        public var requests: Int
        /// Seconds it took.
        public var seconds: Double
        /// Writes per second.
        public var opsPerSecond: Double
        /// Error replies (such as out of memory): keys that are not there.
        public var errors: Int

        enum CodingKeys: String, CodingKey {
            case requests, seconds, errors
            case opsPerSecond = "ops_per_sec"
        }
    }

    /// The protocol spoken: `cachet`, `memcache` or `resp`.
    public var `protocol`: String
    /// The servers loaded, as `host:port`.
    public var targets: [String]
    /// The run's settings.
    public var config: Settings
    /// Seconds measured.
    public var durationSeconds: Double
    /// Replies received while measuring.
    public var requests: Int
    /// Replies per second while measuring.
    public var opsPerSecond: Double
    /// Reads that found a value.
    public var hits: Int
    /// Reads that found nothing.
    public var misses: Int
    /// hits / (hits + misses); 0 without reads.
    public var hitRatio: Double
    /// Error replies while measuring.
    public var errors: Int
    /// Replies that contradict the request or, after a prefill, what was written: a miss, a value of
    /// the wrong length, or a reply of the wrong kind.
    public var verificationErrors: Int
    /// Request latency while measuring.
    public var latencyUs: Latency
    /// The latency of reads alone (GET), when any were measured. With a mix of reads and writes the
    /// overall p99 often falls among the slower kind; these two say which.
    public var getLatencyUs: Latency?
    /// The latency of writes alone (PUT, or the protocol's SET), when any were measured.
    public var putLatencyUs: Latency?
    /// CPU seconds (user and system) the load generator itself used while measuring: near
    /// `duration_seconds x threads` means the load generator, not the server, set the pace.
    public var clientCPUSeconds: Double
    /// The prefill, when there was one.
    public var prefill: Prefill?

    enum CodingKeys: String, CodingKey {
        case `protocol`, targets, config, requests, hits, misses, errors, prefill
        case durationSeconds = "duration_seconds"
        case opsPerSecond = "ops_per_sec"
        case hitRatio = "hit_ratio"
        case verificationErrors = "verification_errors"
        case latencyUs = "latency_us"
        case getLatencyUs = "get_latency_us"
        case putLatencyUs = "put_latency_us"
        case clientCPUSeconds = "client_cpu_seconds"
    }

    /// Whether the run saw error replies or verification errors (`cachet-bench` then exits with 1).
    public var hasErrors: Bool { errors > 0 || verificationErrors > 0 || (prefill?.errors ?? 0) > 0 }

    /// One JSON object on one line, keys sorted.
    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? String(decoding: encoder.encode(self), as: UTF8.self)) ?? "{}"
    }

    /// A short human summary.
    public var summary: String {
        func format(_ value: Double, _ digits: Int = 1) -> String { String(format: "%.\(digits)f", value) }
        func latencyLine(_ latency: Latency) -> String {
            "p50 \(format(latency.p50))  p99 \(format(latency.p99))  p99.9 \(format(latency.p999))  "
                + "max \(format(latency.max))"
        }
        var lines = [
            "\(`protocol`) \(targets.joined(separator: ",")): \(config.connections) connections x pipeline "
                + "\(config.pipeline), \(config.threads) thread(s), \(config.valueSize) B values, \(config.keys) keys "
                + "(\(config.distribution)), \(Int((config.getRatio * 100).rounded()))% GET"
                + (config.keysPerGet > 1 ? " of \(config.keysPerGet) keys each" : "")
                + (config.rate.map { ", paced at \(format($0, 0)) requests/s" } ?? "")
        ]
        if let prefill {
            lines.append(
                "  prefill: \(prefill.requests) writes in \(format(prefill.seconds, 2)) s "
                    + "(\(format(prefill.opsPerSecond, 0)) ops/s), errors \(prefill.errors)"
            )
        }
        if requests > 0 || config.requests != 0 {
            let cpu = durationSeconds > 0 ? clientCPUSeconds / durationSeconds * 100 : 0
            lines += [
                "  \(format(opsPerSecond, 0)) ops/s over \(format(durationSeconds, 2)) s (\(requests) requests); "
                    + "client CPU \(format(cpu, 0))% of one core",
                "  latency us: " + latencyLine(latencyUs),
                "  hit ratio \(format(hitRatio * 100, 2))%  errors \(errors)  verification errors \(verificationErrors)",
            ]
            if let getLatencyUs, let putLatencyUs {
                lines.insert("    GET:      " + latencyLine(getLatencyUs), at: lines.count - 1)
                lines.insert("    PUT:      " + latencyLine(putLatencyUs), at: lines.count - 1)
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// One second's progress, for the live line.
public struct BenchProgress: Sendable, Equatable {
    /// Seconds since the phase started.
    public var elapsed: Double
    /// Replies per second over the last interval.
    public var opsPerSecond: Double
    /// 99th percentile latency over the last interval, in microseconds; nil when nothing was measured.
    public var p99Microseconds: Double?
    /// Hit ratio of the phase so far.
    public var hitRatio: Double
    /// Error replies and verification errors of the phase so far.
    public var errors: Int
    /// Whether this is the prefill phase.
    public var prefilling: Bool
    /// Whether this is the warm-up (not measured).
    public var warmingUp: Bool

    /// Creates a progress report.
    public init(
        elapsed: Double,
        opsPerSecond: Double,
        p99Microseconds: Double?,
        hitRatio: Double,
        errors: Int,
        prefilling: Bool = false,
        warmingUp: Bool = false
    ) {
        self.elapsed = elapsed
        self.opsPerSecond = opsPerSecond
        self.p99Microseconds = p99Microseconds
        self.hitRatio = hitRatio
        self.errors = errors
        self.prefilling = prefilling
        self.warmingUp = warmingUp
    }

    /// `[3s] 152340 ops/s  p99 0.41 ms  hits 99.8%  errors 0`.
    public var line: String {
        let phase = prefilling ? " prefill" : warmingUp ? " warmup" : ""
        var text = "[\(Int(elapsed.rounded()))s\(phase)] \(Int(opsPerSecond.rounded())) ops/s"
        if let p99Microseconds { text += "  p99 " + String(format: "%.2f", p99Microseconds / 1000) + " ms" }
        if !prefilling { text += "  hits " + String(format: "%.1f", hitRatio * 100) + "%" }
        return text + "  errors \(errors)"
    }
}
