import CachetClient
import CachetTestSupport
import MetricsTestKit
import Testing

/// CachetClient's metrics (swift-metrics) into a test backend of its own: requests by operation and
/// outcome, their durations, and node states.
@Suite("CachetClient metrics", .dedicatedThreads)
struct ClientMetricsTests {
    @Test func requestsOutcomesDurationsAndNodeStatesAreReported() async throws {
        let metrics = TestMetrics()
        let cluster = try await NodeCluster.start(count: 1)
        var configuration = cluster.configuration()
        configuration.failover = false
        let client = try CachetClient(configuration: configuration, metricsFactory: metrics)
        for index in 0..<5 { try await client.put("k\(index)", value: [1]) }
        for index in 0..<8 { _ = try await client.get("k\(index)") }
        _ = try await client.delete("k0")
        await client.shutdown()

        func count(_ operation: String, _ outcome: String) throws -> Int64 {
            try metrics.expectCounter(
                "cachet_client_requests_total",
                [("operation", operation), ("outcome", outcome)]
            ).totalValue
        }
        #expect(try count("put", "ok") == 5)
        #expect(try count("get", "ok") == 5)
        #expect(try count("get", "not_found") == 3)
        #expect(try count("delete", "ok") == 1)
        #expect(try count("get", "timeout") == 0)
        let gets = try metrics.expectTimer("cachet_client_request_duration_seconds", [("operation", "get")])
        #expect(gets.values.count == 8)
        #expect(gets.values.allSatisfy { $0 > 0 })
        let node = try metrics.expectGauge("cachet_client_node_up", [("node", cluster.node(0).id)])
        #expect(node.lastValue == 1)
    }
}
