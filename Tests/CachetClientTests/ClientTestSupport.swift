import CachetClient
import CachetTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Real `cachet-node` processes for a test, stopped (and resumed first if frozen) when released.
final class NodeCluster: @unchecked Sendable {
    // Immutable after init; the processes are only signalled.
    let processes: [NodeProcess]

    private init(processes: [NodeProcess]) { self.processes = processes }

    /// Starts `count` nodes, waiting for them with `Task.sleep` so that no thread of the task pool (which
    /// other tests' timing depends on) is held meanwhile.
    static func start(
        count: Int,
        arguments: [String] = ["--memory-limit", "64MiB", "--disk-limit", "0"]
    ) async throws -> NodeCluster {
        var processes: [NodeProcess] = []
        for _ in 0..<count { processes.append(try await NodeProcess.start(arguments: arguments)) }
        return NodeCluster(processes: processes)
    }

    /// The client's view of node `i`.
    func node(_ index: Int) -> CachetClient.Node {
        CachetClient.Node(host: "127.0.0.1", port: processes[index].port)
    }

    var nodes: [CachetClient.Node] { processes.indices.map(node) }

    /// A configuration of every node with short timeouts.
    func configuration(
        timeout: Duration = .seconds(5),
        _ configure: (inout CachetClient.Configuration) -> Void = { _ in }
    ) -> CachetClient.Configuration {
        var configuration = CachetClient.Configuration(nodes: nodes)
        configuration.requestTimeout = timeout
        configuration.connectTimeout = timeout
        configure(&configuration)
        return configuration
    }

    deinit {
        for process in processes where process.process.isRunning {
            kill(process.process.processIdentifier, SIGCONT)
            process.stop(signal: SIGKILL, timeout: 5)
        }
    }
}

/// Runs `body` with a client, and shuts the client down even when `body` throws.
func withClient<R>(
    _ configuration: CachetClient.Configuration,
    _ body: (CachetClient) async throws -> R
) async throws -> R {
    let client = try CachetClient(configuration: configuration)
    do {
        let result = try await body(client)
        await client.shutdown()
        return result
    } catch {
        await client.shutdown()
        throw error
    }
}

/// A port nothing listens on right now (bound to 0 and released).
func closedPort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            _ = bind(fd, $0, length)
            return getsockname(fd, $0, &length)
        }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// The monotonic time elapsed while `body` runs.
func measure<R>(_ body: () async throws -> R) async rethrows -> (R, Duration) {
    let start = ContinuousClock.now
    let result = try await body()
    return (result, ContinuousClock.now - start)
}

/// Expects `body` to fail with a ``CachetClientError`` of `code`; returns the error.
@discardableResult
func expectFailure<R>(
    _ code: CachetClientError.Code,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws(CachetClientError) -> R
) async -> CachetClientError? {
    do {
        _ = try await body()
        Issue.record("expected a \(code) failure, but the call succeeded", sourceLocation: sourceLocation)
        return nil
    } catch {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    }
}

/// Cancels `call`, a request waiting for a node that does not answer, and expects it to fail with
/// `cancelled` within 200 ms (plus whatever the task pool was stalled meanwhile).
func expectCancelledPromptly(
    _ call: Task<[UInt8]?, any Error>,
    sourceLocation: SourceLocation = #_sourceLocation
) async {
    let (result, took, stall) = await measureWithStalls {
        call.cancel()
        return await call.result
    }
    #expect(took < .milliseconds(200) + stall, sourceLocation: sourceLocation)
    guard case .failure(let error) = result else {
        Issue.record("a cancelled request succeeded", sourceLocation: sourceLocation)
        return
    }
    #expect((error as? CachetClientError)?.code == .cancelled, "\(error)", sourceLocation: sourceLocation)
}

/// Runs `body` and returns its result, the time it took, and how long the task pool was unavailable
/// meanwhile: every wait of a ``PoolStallMonitor`` probe (an empty task enqueued every 2 ms from a thread
/// outside the pool) beyond 1 ms, added up. Blocking tests run on dedicated threads
/// (`.dedicatedThreads`), but CPU-bound tests may still occupy every pool thread for a moment; a deadline
/// check adds the stall to its bound, so that it still catches a client that is late by itself but not
/// one that could not run at all. Every stall is added, not just the worst: what is measured may need the
/// pool several times (the cancellation handler, then the cancelled task).
func measureWithStalls<R>(_ body: () async throws -> R) async rethrows -> (R, Duration, stall: Duration) {
    let monitor = PoolStallMonitor(interval: .milliseconds(2))
    monitor.start()
    defer { _ = monitor.stop() }
    let start = ContinuousClock.now
    let result = try await body()
    let took = ContinuousClock.now - start
    return (result, took, monitor.stop().total)
}
