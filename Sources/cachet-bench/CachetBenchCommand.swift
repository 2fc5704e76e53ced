import ArgumentParser
import CachetBenchKit
import CachetIO
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
            1 error replies or verification errors, 2 usage or connection errors. Load only 127.0.0.1 or \
            servers you own.

            Examples:
              cachet-bench --port 7420 --prefill --duration 10
              cachet-bench --protocol memcache --port 11211 --pipeline 16 --json
              cachet-bench --port 7420 --prefill --rate 20000   (latency at a fixed load)
              cachet-bench --fill 1000000 --value-size 100 --key-size 14   (write 1,000,000 keys, then exit)
            """
    )

    @Option(help: "Server address: an IPv4 or IPv6 address, or a host name.") var host = "127.0.0.1"
    @Option(help: "Server port (default: 7420, 11211 or 6379 by protocol).") var port: Int?
    @Option(
        help: "A cluster file, the JSON file the nodes read (Protocol/CLUSTER.md); each key goes to its owner."
    )
    var cluster: String?
    @Option(help: "cachet, memcache or resp.") var `protocol` = "cachet"
    @Option(help: "Connections in all.") var connections = 50
    @Option(help: "Requests in flight per connection.") var pipeline = 1
    @Option(help: "Distinct keys.") var keys = 100_000
    @Option(help: "Bytes per key: key: and a zero-padded index (key:0000000042 at 14), widened when --keys needs it.")
    var keySize = 14
    @Option(help: "Bytes per value.") var valueSize = 100
    @Option(help: "Share of GETs, 0 to 1.") var getRatio = 0.9
    @Option(help: "Keys per GET: one memcached get of that many keys (--protocol memcache only).")
    var keysPerGet = 1
    @Option(help: "Seconds to measure (default 10 unless --requests is given).") var duration: Double?
    @Option(help: "Requests to measure in all (instead of, or as well as, --duration).") var requests: Int?
    @Option(help: "Seconds of load before measuring.") var warmup: Double = 0
    @Option(
        help: "Requests per second in all, on a fixed schedule; latency counts from each request's scheduled time."
    )
    var rate: Double?
    @Option(help: "uniform or zipf (exponent 0.99).") var distribution = "uniform"
    @Flag(help: "Write every key once before measuring; then every GET must hit.") var prefill = false
    @Option(help: "Write N keys once (--keys N --prefill --requests 0) and exit: for memory measurements.")
    var fill: Int?
    @Option(help: "Load threads, each with its own event loop.") var threads = 1
    @Option(help: "Random seed.") var seed: UInt64 = 42
    @Flag(help: "Print one JSON object instead of the summary.") var json = false
    @Flag(help: "No progress line.") var quiet = false
    @Option(
        help: """
            raw (the load generator's own connections) or client (--connections tasks share one CachetClient, \
            each doing one request at a time; --pipeline, --threads and --rate do not apply).
            """
    )
    var driver = "raw"
    @Flag(help: "Speak TLS to the servers (their TLS ports: cachet-node --tls-port, memcached -Z, redis --tls-port).")
    var tls = false
    @Option(help: "With --tls: CA certificates (PEM) the servers' certificates chain to.") var tlsCa: String?
    @Option(help: "With --tls: a client certificate (PEM), for servers that ask for one.") var tlsCert: String?
    @Option(help: "With --tls: the client certificate's private key (PEM).") var tlsKey: String?
    @Option(help: "With --tls: the name the servers' certificates must carry (default: none checked).")
    var tlsServerName: String?
    @Flag(
        help: "Measure CachetClient's coders (JSON and binary) on two typical app values and exit; no server is loaded."
    )
    var coders = false
    @Option(
        help: """
            Read one hot KEY through CachetClient's read-through (leases) with --connections tasks for --duration \
            seconds, against a database directory (--herd-database, files version and deleted) another process \
            updates; prints reads, loads and stale reads as JSON.
            """
    )
    var herd: String?
    @Option(help: "With --herd: the key's TTL in seconds.") var herdTtl = 1
    @Option(help: "With --herd: the database directory (files version and deleted).") var herdDatabase: String?
    @Option(help: "With --herd: milliseconds each load takes (the slow database).") var herdLoadMs = 50
    @Option(help: "Watchers beside the load: connections to the first server that WATCH --watchers-prefix.")
    var watchers = 0
    @Option(
        help: """
            With --watchers: the prefix they watch, {n} replaced by each watcher's number (the load's keys \
            start with 'key:').
            """
    )
    var watchersPrefix = "nothing-matches:"
    @Flag(help: "With --watchers: events carry values.") var watchersValues = false
    @Option(
        help: """
            Store the file at this path under one key (--value-key) through CachetClient, in parts, read it back \
            as a stream into PATH.read, compare, and print the seconds and the client's peak memory as JSON.
            """
    )
    var valueFile: String?
    @Option(help: "With --value-file: the key.") var valueKey = "value-file"
    @Option(help: "With --driver client: the client's connections per node.") var clientConnections = 2
    @Option(help: "With --driver client: the client's event loop linger in microseconds (0 to 2000).")
    var clientLingerUs = 500

    /// `--coders`: CachetClient's JSON and binary coders on typical app values, best of three rounds of
    /// `--duration` seconds (1 by default) each way.
    func runCoders() throws {
        func rate(_ value: Double) -> String { String(Int(value.rounded())) }
        func ratio(_ value: Double) -> String { String(format: "%.2f", value) }
        for (index, sample) in CoderBench.samples.enumerated() {
            let (json, binary) = try sample.run(duration ?? 1)
            print("\(index == 0 ? "" : "\n")\(sample.title):")
            print("| coder | bytes | encodes/s | decodes/s |")
            print("|---|---|---|---|")
            for result in [json, binary] {
                print(
                    "| \(result.name) | \(result.bytes) | \(rate(result.encodesPerSecond)) | \(rate(result.decodesPerSecond)) |"
                )
            }
            let roundTrip = { (result: CoderBench.Result) in
                1 / (1 / result.encodesPerSecond + 1 / result.decodesPerSecond)
            }
            print(
                "binary / JSON: encode \(ratio(binary.encodesPerSecond / json.encodesPerSecond))x, "
                    + "decode \(ratio(binary.decodesPerSecond / json.decodesPerSecond))x, "
                    + "round trip \(ratio(roundTrip(binary) / roundTrip(json)))x"
            )
        }
    }

    /// Runs the command, with usage errors ending in exit status 2 like connection errors.
    static func main() {
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch {
            if exitCode(for: error) == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }

    func makeConfiguration() throws -> BenchConfiguration {
        var configuration = BenchConfiguration()
        guard let kind = BenchProtocol(rawValue: self.protocol) else {
            throw ValidationError("--protocol must be cachet, memcache or resp")
        }
        guard let keyDistribution = BenchDistribution(rawValue: distribution) else {
            throw ValidationError("--distribution must be uniform or zipf")
        }
        configuration.protocolKind = kind
        if let cluster {
            guard port == nil else { throw ValidationError("give --cluster or --port, not both") }
            do {
                (configuration.targets, configuration.virtualNodesPerMember) = try BenchTarget.targets(
                    inClusterFile: cluster
                )
            } catch {
                throw ValidationError("--cluster \(cluster): \(error.message)")
            }
        } else {
            configuration.targets = [BenchTarget(host: host, port: port ?? kind.defaultPort)]
        }
        configuration.connections = connections
        configuration.pipeline = pipeline
        configuration.keys = keys
        configuration.keySize = keySize
        configuration.valueSize = valueSize
        configuration.getRatio = getRatio
        configuration.keysPerGet = keysPerGet
        configuration.requests = requests
        configuration.duration = requests == nil ? (duration ?? 10) : duration
        configuration.warmup = warmup
        configuration.rate = rate
        configuration.distribution = keyDistribution
        configuration.prefill = prefill
        configuration.threads = threads
        configuration.seed = seed
        if tls {
            configuration.tls = CachetTLSConfiguration(
                certificateFile: tlsCert,
                keyFile: tlsKey,
                caFile: tlsCa,
                serverName: tlsServerName
            )
        } else if tlsCa != nil || tlsCert != nil || tlsKey != nil || tlsServerName != nil {
            throw ValidationError("--tls-ca, --tls-cert, --tls-key and --tls-server-name need --tls")
        }
        if let fill {
            guard requests == nil && duration == nil && warmup == 0 && rate == nil else {
                throw ValidationError(
                    "--fill writes keys and exits: it takes no --requests, --duration, --warmup or --rate"
                )
            }
            configuration.keys = fill
            configuration.prefill = true
            configuration.requests = 0
            configuration.duration = nil
        }
        do {
            try configuration.validate()
        } catch {
            throw ValidationError(error.message)
        }
        return configuration
    }

    func run() throws {
        if coders {
            try runCoders()
            return
        }
        let configuration = try makeConfiguration()
        if let valueFile {
            do {
                let report = try ValueFileBench.run(configuration, file: valueFile, key: valueKey)
                print(report.json)
                if !report.identical { throw ExitCode(1) }
            } catch let error as BenchError {
                FileHandle.standardError.write(Data("cachet-bench: \(error.message)\n".utf8))
                throw ExitCode(2)
            }
            return
        }
        if let herd {
            guard let database = herdDatabase else { throw ValidationError("--herd needs --herd-database DIRECTORY") }
            do {
                let report = try HerdBench.run(
                    configuration,
                    key: herd,
                    ttl: herdTtl,
                    database: database,
                    loadMilliseconds: herdLoadMs
                )
                print(report.json)
                if report.stale + report.errors > 0 { throw ExitCode(1) }
            } catch let error as BenchError {
                FileHandle.standardError.write(Data("cachet-bench: \(error.message)\n".utf8))
                throw ExitCode(2)
            }
            return
        }
        guard driver == "raw" || driver == "client" else { throw ValidationError("--driver must be raw or client") }
        if driver == "client" {
            try runClientDriver(configuration)
            return
        }
        let report: BenchReport
        var watching: WatchersLoad?
        do {
            if watchers > 0 {
                watching = try WatchersLoad(
                    target: configuration.targets[0],
                    count: watchers,
                    prefix: watchersPrefix,
                    values: watchersValues,
                    tls: configuration.tls
                )
                watching?.start()
            }
            report = try CachetBench.run(configuration) { progress in
                if !quiet { FileHandle.standardError.write(Data((progress.line + "\n").utf8)) }
            }
        } catch {
            FileHandle.standardError.write(Data("cachet-bench: \(error.message)\n".utf8))
            throw ExitCode(2)
        }
        if let watched = watching?.stop() {
            let line =
                "watchers: \(watchers) on '\(watchersPrefix)' received \(watched.events) events (\(watched.gaps) gaps) "
                + "in \(String(format: "%.1f", watched.seconds)) s: \(Int(Double(watched.events) / watched.seconds)) events/s"
            FileHandle.standardError.write(Data((line + "\n").utf8))
        }
        print(json ? report.json : report.summary)
        if report.hasErrors {
            FileHandle.standardError.write(
                Data(
                    ("cachet-bench: \(report.errors + (report.prefill?.errors ?? 0)) error replies, "
                        + "\(report.verificationErrors) verification errors\n").utf8
                )
            )
            throw ExitCode(1)
        }
    }
}

extension CachetBenchCommand {
    /// `--driver client`: the same keys and mix through the CachetClient library.
    func runClientDriver(_ configuration: BenchConfiguration) throws {
        guard configuration.protocolKind == .cachet else { throw ValidationError("--driver client speaks only cachet") }
        let report: ClientBenchReport
        do {
            report = try ClientBenchDriver.run(
                configuration,
                connectionsPerNode: clientConnections,
                linger: .microseconds(clientLingerUs)
            )
        } catch {
            FileHandle.standardError.write(Data("cachet-bench: \(error.message)\n".utf8))
            throw ExitCode(2)
        }
        print(json ? report.json : report.summary)
        if report.errors + report.verificationErrors > 0 { throw ExitCode(1) }
    }
}
