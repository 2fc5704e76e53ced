import CachetClient
import Logging
import ServiceLifecycle
import Testing

@Suite("CachetClient as a Service")
struct ClientServiceTests {
    @Test("run() lasts until graceful shutdown, then shuts the client down")
    func serviceGroup() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        let client = try CachetClient(configuration: cluster.configuration())
        var logger = Logger(label: "cachet.test")
        logger.logLevel = .critical
        let group = ServiceGroup(configuration: .init(services: [client], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await client.put("service", value: [4, 2])
            #expect(try await client.get("service") == [4, 2])
            await group.triggerGracefulShutdown()
            try await tasks.next()
        }
        await expectFailure(.shutdown) { () throws(CachetClientError) in _ = try await client.get("service") }
    }
}
