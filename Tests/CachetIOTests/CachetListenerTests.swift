import CachetIO
import CachetTestSupport
import Foundation
import Testing

/// Accepting on the loop (``CachetListener``), with real sockets on 127.0.0.1.
@Suite(.serialized, .dedicatedThreads) struct CachetListenerTests {
    /// A burst of connections is accepted in full (the registration is edge-triggered: one event, many
    /// connections), each served by the loop; once the listener is closed, connecting is refused.
    @Test func acceptsABurstAndStopsWhenClosed() throws {
        let loop = try CachetEventLoop(label: "test.listener")
        loop.start()
        defer { loop.stop() }
        let server = try EchoServer(loop: loop)
        let clients = try (0..<64).map { _ in
            try CachetBlockingConnection(to: CachetAddress(host: "127.0.0.1", port: server.port), timeout: .seconds(2))
        }
        for (index, client) in clients.enumerated() {
            try client.send([UInt8(index)], until: CachetDeadline(after: .seconds(2)))
        }
        for (index, client) in clients.enumerated() {
            while client.input.readableBytes < 1 { try client.receive(until: CachetDeadline(after: .seconds(2))) }
            #expect(Array(client.input.readableRegion) == [UInt8(index)], "client \(index)")
        }
        // The listener is a channel of the loop beside the 64 connections.
        #expect(loop.executeAndWait { loop.channelCount } == 65)
        server.stop()
        #expect(loop.executeAndWait { loop.channelCount } == 64)
        // The port is closed: a connection is refused. (Other tests pick free ports by binding port 0 and
        // closing it, so the freed port may already be another process's listener: then the connection goes
        // there, and this loop still accepts nothing.)
        do {
            let late = try CachetBlockingConnection(
                to: CachetAddress(host: "127.0.0.1", port: server.port),
                timeout: .seconds(1)
            )
            late.close()
            Thread.sleep(forTimeInterval: 0.1)
            #expect(loop.executeAndWait { loop.channelCount } == 64, "the closed listener accepted a connection")
        } catch {
            #expect(error.code == .connectionRefused, "\(error)")
        }
    }
}
