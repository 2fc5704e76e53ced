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

    init(count: Int, arguments: [String] = ["--memory-limit", "64MiB", "--disk-limit", "0"]) throws {
        var processes: [NodeProcess] = []
        for _ in 0..<count { processes.append(try NodeProcess(arguments: arguments)) }
        self.processes = processes
    }

    /// Starts `count` nodes on a thread of its own, so that waiting for them does not hold a thread of
    /// the tasks' cooperative pool (which other tests' timing depends on).
    static func start(count: Int) async throws -> NodeCluster {
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<NodeCluster, any Error>, Never>) in
            Thread.detachNewThread {
                continuation.resume(returning: Result { try NodeCluster(count: count) })
            }
        }
        return try result.get()
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

/// Runs `body` and returns its result, the time it took, and how long the task pool was stalled meanwhile
/// (how late the 2 ms sleeps of a sibling task woke up, beyond 1 ms of ordinary slack each, added up). Other tests in the same process
/// may block every thread of the pool for a while; a deadline check adds the stall to its bound, so that
/// it still catches a client that is late by itself but not one that could not run at all.
func measureWithStalls<R>(_ body: () async throws -> R) async rethrows -> (R, Duration, stall: Duration) {
    let created = ContinuousClock.now
    let watch = Task { () -> Duration in
        // A pool blocked from the start keeps this task from running at all: that wait counts too. Every
        // later stall is added, not just the worst: what is measured may need the pool several times (the
        // cancellation handler, then the cancelled task), and each of those waits can meet its own stall.
        var stalled = ContinuousClock.now - created
        while !Task.isCancelled {
            let before = ContinuousClock.now
            try? await Task.sleep(for: .milliseconds(2))
            stalled += max(.zero, ContinuousClock.now - before - .milliseconds(3))
        }
        return stalled
    }
    let start = ContinuousClock.now
    let result = try await body()
    let took = ContinuousClock.now - start
    watch.cancel()
    return (result, took, await watch.value)
}

/// Stops process `pid` with SIGSTOP and waits (at most 5 s) until every one of its threads is stopped:
/// the signal reaches threads asynchronously, and a thread still running could answer a request.
func freeze(_ pid: Int32) {
    kill(pid, SIGSTOP)
    let deadline = ContinuousClock.now + .seconds(5)
    while ContinuousClock.now < deadline {
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        let stopped = threads.allSatisfy { thread in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return false }
            return stat[stat.index(close, offsetBy: 2)] == "T"
        }
        if !threads.isEmpty && stopped { return }
        usleep(1000)
    }
}
