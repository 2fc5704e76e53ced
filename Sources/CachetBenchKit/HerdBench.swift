import CachetClient
import CachetLocking
import Dispatch

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The read-through herd of "Scaling Memcache at Facebook" (`cachet-bench --herd KEY`): `connections`
/// tasks of one ``CachetClient`` read one hot key through `get(_:as:ttl:loader:)` for `duration` seconds,
/// its TTL short, while another process plays the writer of a "database": a directory with `version` (the
/// value the loader reads, slowly) and `deleted` (the last version whose DEL of the key completed). Every
/// read must return a version at least the `deleted` read before it (never a value older than the last
/// DELETE); the loads are counted, to be summed over the processes and compared with the expiries and
/// deletes.
public enum HerdBench {
    /// What one process saw.
    public struct Report: Sendable, Equatable {
        /// Reads completed.
        public var reads: Int
        /// Calls of the loader in this process.
        public var loads: Int
        /// Reads that returned a version older than the last completed DELETE before them.
        public var stale: Int
        /// Reads that failed.
        public var errors: Int

        /// One JSON object.
        public var json: String {
            "{\"reads\":\(reads),\"loads\":\(loads),\"stale\":\(stale),\"errors\":\(errors)}"
        }
    }

    /// The cached value: the database's version when it was loaded.
    struct Value: Codable, Sendable {
        var version: Int
    }

    /// Reads a file of the database: an integer, 0 when it is missing.
    static func read(_ path: String) -> Int {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
        return Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }

    /// Runs the herd and reports.
    /// - Parameters:
    ///   - configuration: the node(s), `connections` (the tasks) and `duration`.
    ///   - key: the hot key.
    ///   - ttl: the key's TTL in seconds.
    ///   - database: the directory of `version` and `deleted`.
    ///   - loadMilliseconds: how long a load takes (the slow database).
    public static func run(
        _ configuration: BenchConfiguration,
        key: String,
        ttl: Int,
        database: String,
        loadMilliseconds: Int = 50
    ) throws(BenchError) -> Report {
        try waitForTask { () async throws(BenchError) in
            var clientConfiguration = CachetClient.Configuration(
                nodes: configuration.targets.map { CachetClient.Node(host: $0.host, port: $0.port, id: $0.id) }
            )
            clientConfiguration.requestTimeout = .seconds(5)
            clientConfiguration.tls = configuration.tls
            let client: CachetClient
            do {
                client = try CachetClient(configuration: clientConfiguration)
            } catch {
                throw BenchError(.invalidConfiguration, "\(error)")
            }
            let report = await herd(client, configuration, key, ttl, database, loadMilliseconds)
            await client.shutdown()
            return report
        }
    }

    private static func herd(
        _ client: CachetClient,
        _ configuration: BenchConfiguration,
        _ key: String,
        _ ttl: Int,
        _ database: String,
        _ loadMilliseconds: Int
    ) async -> Report {
        let loads = CachetLock(0)
        let end = ContinuousClock.now + .seconds(configuration.duration ?? 10)
        return await withTaskGroup(of: Report.self) { group in
            for _ in 0..<configuration.connections {
                group.addTask {
                    var report = Report(reads: 0, loads: 0, stale: 0, errors: 0)
                    while ContinuousClock.now < end {
                        let floor = read(database + "/deleted")
                        do {
                            let value = try await client.get(key, as: Value.self, ttl: .seconds(ttl)) {
                                loads.withLock { $0 += 1 }
                                let version = read(database + "/version")
                                try await Task.sleep(for: .milliseconds(loadMilliseconds))
                                return Value(version: version)
                            }
                            report.reads += 1
                            if value.version < floor { report.stale += 1 }
                        } catch {
                            report.errors += 1
                        }
                    }
                    return report
                }
            }
            var total = Report(reads: 0, loads: 0, stale: 0, errors: 0)
            for await report in group {
                total.reads += report.reads
                total.stale += report.stale
                total.errors += report.errors
            }
            total.loads = loads.withLock { $0 }
            return total
        }
    }
}
