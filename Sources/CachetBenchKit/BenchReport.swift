import Foundation

/// What a run measured.
public struct BenchReport: Codable, Sendable, Equatable {
    /// Latency percentiles in microseconds.
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

    /// The protocol spoken.
    public var protocolName: String
    /// The servers loaded, as `host:port`.
    public var targets: [String]
    /// Connections, pipeline depth, threads.
    public var connections: Int
    /// Requests in flight per connection.
    public var pipeline: Int
    /// Load threads.
    public var threads: Int
    /// Bytes per value.
    public var valueSize: Int
    /// Distinct keys.
    public var keys: Int
    /// Share of reads.
    public var getRatio: Double
    /// Key distribution.
    public var distribution: String
    /// Seconds measured.
    public var durationSeconds: Double
    /// Replies received while measuring.
    public var requests: Int
    /// Replies per second.
    public var opsPerSecond: Double
    /// Reads that found a value.
    public var hits: Int
    /// Reads that found nothing.
    public var misses: Int
    /// hits / (hits + misses).
    public var hitRatio: Double
    /// Error replies.
    public var errors: Int
    /// Replies that contradict what was written (after --prefill: a miss, or a value of the wrong length).
    public var verificationErrors: Int
    /// Request latency.
    public var latencyMicroseconds: Latency

    /// One JSON object, keys sorted.
    public var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? String(decoding: encoder.encode(self), as: UTF8.self)) ?? "{}"
    }

    /// A short human summary.
    public var summary: String {
        func format(_ value: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", value) }
        return """
            \(protocolName) \(targets.joined(separator: ",")): \(connections) connections x pipeline \(pipeline), \
            \(threads) thread(s), \(valueSize) B values, \(keys) keys (\(distribution)), \(Int(getRatio * 100))% GET
              \(format(opsPerSecond, 0)) ops/s over \(format(durationSeconds)) s (\(requests) requests)
              latency us: p50 \(format(latencyMicroseconds.p50, 1))  p99 \(format(latencyMicroseconds.p99, 1))  \
            p99.9 \(format(latencyMicroseconds.p999, 1))  max \(format(latencyMicroseconds.max, 1))
              hit ratio \(format(hitRatio * 100, 2))%  errors \(errors)  verification errors \(verificationErrors)
            """
    }
}

/// One second's progress, for the live line.
public struct BenchProgress: Sendable {
    /// Seconds since measuring started.
    public var elapsed: Double
    /// Replies in the last second.
    public var opsPerSecond: Double
    /// Hit ratio so far.
    public var hitRatio: Double
    /// Errors so far (error replies and verification errors).
    public var errors: Int
    /// Whether this is the prefill phase.
    public var prefilling: Bool

    /// `[3s] 152340 ops/s  hits 99.8%  errors 0`.
    public var line: String {
        let phase = prefilling ? " prefill" : ""
        return
            "[\(Int(elapsed.rounded()))s\(phase)] \(Int(opsPerSecond)) ops/s  hits \(String(format: "%.1f", hitRatio * 100))%  errors \(errors)"
    }
}
