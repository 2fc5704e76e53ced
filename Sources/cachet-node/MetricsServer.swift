import CachetIO
import CachetNode
import FlyingFox
import FlyingSocks
import Foundation
import Logging
import Synchronization

/// The node's HTTP side (`--http-port`): `/metrics` in Prometheus's text format, `/health/live` (200 while
/// the process answers) and `/health/ready` (200 while the node serves its keys, 503 with the reason while
/// it holds, is in the minority or rebuilds its disk index). Served by FlyingFox on its own threads, apart
/// from the node's I/O loops; every answer is read from the node's counters when asked.
struct MetricsServer {
    let server: HTTPServer
    /// Set by ``stop()``: the server's run then ends as asked, which is no failure to log.
    let stopping: StopRequest

    /// Whether the node asked its HTTP server to stop.
    final class StopRequest: Sendable {
        let requested = Atomic<Bool>(false)
    }

    /// Starts listening; returns once the port is bound.
    /// - Parameters:
    ///   - node: the node whose figures it serves.
    ///   - host: an IPv4 or IPv6 literal to listen on.
    ///   - port: the port (0 picks a free one).
    ///   - values: values served read-only under `/values/` (`--http-values`); nil serves none.
    ///   - logger: where failures go.
    /// - Returns: the server and the port it listens on.
    static func start(
        node: CachetNodeServer,
        host: String,
        port: Int,
        values: HTTPValues? = nil,
        logger: Logger
    ) async throws -> (MetricsServer, Int) {
        let address: any SocketAddress =
            host.contains(":")
            ? try sockaddr_in6.inet6(ip6: host, port: UInt16(port))
            : try sockaddr_in.inet(ip4: host, port: UInt16(port))
        let server = HTTPServer(address: address, timeout: 5, logger: .disabled)
        await server.appendRoute("GET /metrics") { _ in
            let valuesText = await values?.metricsText ?? ""
            return HTTPResponse(
                statusCode: .ok,
                headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: Data((node.metricsText + valuesText).utf8)
            )
        }
        await server.appendRoute("GET /health/live") { _ in
            HTTPResponse(statusCode: .ok, headers: [.contentType: "text/plain"], body: Data("live\n".utf8))
        }
        await server.appendRoute("GET /health/ready") { _ in
            let (ready, reason) = node.readiness
            return HTTPResponse(
                statusCode: ready ? .ok : .serviceUnavailable,
                headers: [.contentType: "text/plain"],
                body: Data("\(reason)\n".utf8)
            )
        }
        if let values { await HTTPValues.addRoutes(to: server, values: values) }
        let stopping = StopRequest()
        Task {
            do {
                try await server.run()
            } catch {
                // A graceful stop ends the run (with a CancellationError): expected, not an error.
                if stopping.requested.load(ordering: .acquiring) {
                    logger.debug("the HTTP server stopped")
                } else {
                    logger.error("the HTTP server stopped", metadata: ["error.message": "\(error)"])
                }
            }
        }
        try await server.waitUntilListening(timeout: 5)
        var bound = port
        switch await server.listeningAddress {
        case .ip4(_, let listening), .ip6(_, let listening): bound = Int(listening)
        default: break
        }
        // The HTTP server writes a response's head and body in separate writes: with Nagle's algorithm the
        // last short segment of a body waits for the client's delayed ACK, about 40 ms on every answer longer
        // than a segment (a p90 of 45 ms for 1 MiB ranges, 3.6 ms without; BENCHMARKS.md). The server
        // library keeps its socket to itself.
        CachetSocket.setNoDelay(onListenerOf: bound)
        return (MetricsServer(server: server, stopping: stopping), bound)
    }

    /// Stops accepting and closes the connections.
    func stop() async {
        stopping.requested.store(true, ordering: .releasing)
        await server.stop(timeout: 1)
    }
}
