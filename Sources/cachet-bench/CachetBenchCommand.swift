import ArgumentParser
import CachetBenchKit
import Foundation

/// `cachet-bench`: a load generator for Cachet, memcached and Redis. All logic lives in CachetBenchKit.
@main
struct CachetBenchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cachet-bench",
        abstract: "Loads a Cachet node (or memcached, or Redis) and reports throughput and latency.",
        discussion: """
            Every reply is checked; with --prefill every GET must hit with the right length. A progress line \
            goes to stderr once a second; the summary (or --json) goes to stdout. Exit status: 0 ok, \
            1 verification or error replies, 2 usage or connection errors. Load only 127.0.0.1 or servers \
            you own.
            """
    )

    @Option(help: "Server address.") var host = "127.0.0.1"
    @Option(help: "Server port (default: 7420, 11211 or 6379 by protocol).") var port: Int?
    @Option(help: "A file of host:port lines; connections are spread over them.") var cluster: String?
    @Option(help: "cachet, memcache or resp.") var `protocol` = "cachet"
    @Option(help: "Connections in all.") var connections = 50
    @Option(help: "Requests in flight per connection.") var pipeline = 1
    @Option(help: "Distinct keys.") var keys = 100_000
    @Option(help: "Bytes per key.") var keySize = 14
    @Option(help: "Bytes per value.") var valueSize = 100
    @Option(help: "Share of GETs, 0 to 1.") var getRatio = 0.9
    @Option(help: "Seconds to measure.") var duration: Double?
    @Option(help: "Requests to send in all (instead of --duration).") var requests: Int?
    @Option(help: "uniform or zipf.") var distribution = "uniform"
    @Flag(help: "Write every key once before measuring; then every GET must hit.") var prefill = false
    @Option(help: "Load threads, each with its own epoll loop.") var threads = 1
    @Option(help: "Random seed.") var seed: UInt64 = 42
    @Flag(help: "Print one JSON object instead of the summary.") var json = false
    @Flag(help: "No progress line.") var quiet = false

    func run() throws {
        var configuration = BenchConfiguration()
        guard let kind = BenchProtocol(rawValue: self.protocol) else {
            throw ValidationError("--protocol must be cachet, memcache or resp")
        }
        guard let keyDistribution = BenchDistribution(rawValue: distribution) else {
            throw ValidationError("--distribution must be uniform or zipf")
        }
        configuration.protocolKind = kind
        let defaultPort = [BenchProtocol.cachet: 7420, .memcache: 11211, .resp: 6379][kind]!
        if let cluster {
            guard let text = try? String(contentsOfFile: cluster, encoding: .utf8) else {
                throw ValidationError("cannot read --cluster \(cluster)")
            }
            configuration.targets = try text.split(separator: "\n").compactMap { line in
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed.isEmpty || trimmed.hasPrefix("#") { return nil }
                let parts = trimmed.split(separator: ":")
                guard parts.count == 2, let port = Int(parts[1]) else {
                    throw ValidationError("bad line in \(cluster): \(trimmed)")
                }
                return (String(parts[0]), port)
            }
        } else {
            configuration.targets = [(host, port ?? defaultPort)]
        }
        configuration.connections = connections
        configuration.pipeline = pipeline
        configuration.keys = keys
        configuration.keySize = keySize
        configuration.valueSize = valueSize
        configuration.getRatio = getRatio
        configuration.requests = requests
        configuration.duration = requests == nil ? (duration ?? 10) : duration
        configuration.distribution = keyDistribution
        configuration.prefill = prefill
        configuration.threads = threads
        configuration.seed = seed

        let report: BenchReport
        do {
            report = try CachetBench.run(configuration) { progress in
                if !quiet {
                    FileHandle.standardError.write(Data((progress.line + "\n").utf8))
                }
            }
        } catch {
            FileHandle.standardError.write(Data("cachet-bench: \(error)\n".utf8))
            throw ExitCode(2)
        }
        print(json ? report.json : report.summary)
        if report.errors > 0 || report.verificationErrors > 0 { throw ExitCode(1) }
    }
}
