import CachetIO
import CachetTestSupport
import Testing

@testable import CachetClient

@Suite("CachetClient lifetime")
struct ClientLifetimeTests {
    /// The transport's tick closure holds the transport: unless ``ClientTransport/close()`` lets go of it, a
    /// client's transport, nodes, slots and event loop outlive the client for as long as the process runs.
    @Test(
        "a client let go after use frees its transport and its event loop, shut down first or not",
        arguments: [true, false]
    )
    func aClientLetGoFreesItsTransport(shutDownFirst: Bool) async throws {
        let cluster = try await NodeCluster.start(count: 1)
        weak var transport: ClientTransport?
        weak var loop: CachetEventLoop?
        do {
            let client = try CachetClient(configuration: cluster.configuration())
            try await client.put("lifetime", value: [1, 2, 3])
            #expect(try await client.get("lifetime") == [1, 2, 3])
            transport = client.transport
            loop = client.transport.loop
            if shutDownFirst { await client.shutdown() }
        }
        // Work the loop queued before it stopped may hold them for a moment after the client is gone.
        let deadline = ContinuousClock.now + .seconds(5)
        while transport != nil || loop != nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(transport == nil, "the transport outlived its client")
        #expect(loop == nil, "the event loop outlived its client")
    }
}
