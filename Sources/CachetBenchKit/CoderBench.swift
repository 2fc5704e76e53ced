import CachetClient

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// CachetClient's coders side by side on typical app values (`cachet-bench --coders`): encodes and
/// decodes per second with ``CachetJSONCoder`` and ``CachetBinaryCoder``, and their ratio. No server.
public enum CoderBench {
    /// A user record as an app caches it: numbers, strings, a date, an optional nested struct, an array
    /// and a small dictionary.
    public struct User: Codable, Sendable, Equatable {
        public struct Address: Codable, Sendable, Equatable {
            var street: String
            var city: String
            var postcode: String
        }

        var id: Int
        var name: String
        var email: String
        var createdAt: Date
        var score: Double
        var active: Bool
        var roles: [String]
        var address: Address?
        var preferences: [String: Int]

        /// A representative value.
        public static let sample = User(
            id: 42_000_042,
            name: "Ada Lovelace",
            email: "ada@example.com",
            createdAt: Date(timeIntervalSince1970: 1_764_000_000),
            score: 4.75,
            active: true,
            roles: ["reader", "writer", "admin"],
            address: Address(street: "12 St James's Square", city: "London", postcode: "SW1Y 4JH"),
            preferences: ["theme": 2, "pageSize": 50, "digest": 1]
        )
    }

    /// One coder's figures.
    public struct Result: Sendable {
        public var name: String
        public var bytes: Int
        public var encodesPerSecond: Double
        public var decodesPerSecond: Double
    }

    /// The values measured: what each is, and its measurement.
    public static let samples: [(title: String, run: @Sendable (Double) throws -> (json: Result, binary: Result))] = [
        (
            "a user record (numbers, strings, a date, an array, a nested struct, a dictionary)",
            { try run(User.sample, seconds: $0) }
        ),
        (
            "its address alone (a struct of three strings, no collections)",
            { try run(User.sample.address!, seconds: $0) }
        ),
    ]

    /// Measures both coders on `value` for `seconds` each way, alternating rounds so that a drift of the
    /// machine touches both alike.
    /// - Returns: the JSON coder's figures and the binary coder's, each the best of `rounds`.
    public static func run<Value: Codable & Equatable>(
        _ value: Value,
        seconds: Double = 1,
        rounds: Int = 3
    ) throws -> (json: Result, binary: Result) {
        var json = Result(name: "CachetJSONCoder", bytes: 0, encodesPerSecond: 0, decodesPerSecond: 0)
        var binary = Result(name: "CachetBinaryCoder", bytes: 0, encodesPerSecond: 0, decodesPerSecond: 0)
        for _ in 0..<rounds {
            try measure(CachetJSONCoder(), value, seconds: seconds, into: &json)
            try measure(CachetBinaryCoder(), value, seconds: seconds, into: &binary)
        }
        return (json, binary)
    }

    private static func measure<Value: Codable & Equatable>(
        _ coder: some CachetCoder,
        _ value: Value,
        seconds: Double,
        into result: inout Result
    ) throws {
        let bytes = try coder.encode(value)
        guard try coder.decode(Value.self, from: bytes) == value else {
            throw BenchError(.malformedReply, "\(type(of: coder)) does not round-trip the sample value")
        }
        result.bytes = bytes.count
        let budget = UInt64(seconds * 1e9)
        var count = 0
        var start = monotonicNanoseconds()
        while monotonicNanoseconds() - start < budget {
            for _ in 0..<100 { count &+= try coder.encode(value).count > 0 ? 1 : 0 }
        }
        result.encodesPerSecond = max(
            result.encodesPerSecond,
            Double(count) / (Double(monotonicNanoseconds() - start) / 1e9)
        )
        count = 0
        start = monotonicNanoseconds()
        while monotonicNanoseconds() - start < budget {
            for _ in 0..<100 { count &+= withExtendedLifetime(try coder.decode(Value.self, from: bytes)) { 1 } }
        }
        result.decodesPerSecond = max(
            result.decodesPerSecond,
            Double(count) / (Double(monotonicNanoseconds() - start) / 1e9)
        )
    }
}
