import CachetCluster
import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The node's HTTP side (`--http-port`) on real processes: `/metrics` parsed by Prometheus's own text
/// parser (the `prometheus_client` Python package) with values that match STATS, and `/health/ready`
/// answering 503 while a member holds its keys after a stop, 200 once it serves.
@Suite("Node: metrics and health over HTTP", .serialized, .dedicatedThreads)
struct NodeMetricsTests {
    static let python = "/usr/bin/python3"

    /// Fetches `path` with Python's urllib; with `parse`, parses the body with prometheus_client and
    /// prints each sample as `name{labels} value` (labels sorted), one per line; else prints the status.
    static func fetch(_ port: Int, _ path: String, parse: Bool) throws -> String {
        let script = """
            import sys, urllib.request, urllib.error
            try:
                response = urllib.request.urlopen("http://127.0.0.1:\(port)\(path)", timeout=5)
                status, body = response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                status, body = error.code, error.read().decode()
            if \(parse ? "True" : "False"):
                from prometheus_client.parser import text_string_to_metric_families
                for family in text_string_to_metric_families(body):
                    for sample in family.samples:
                        labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                        print(f"{sample.name}{{{labels}}} {int(sample.value)}")
            else:
                print(status, body.strip())
            """
        let (text, status) = try runProcess(python, ["-c", script])
        guard status == 0 else {
            throw TestSocketError(
                description: "fetching \(path) failed (is python3-prometheus-client installed?): \(text)"
            )
        }
        return text
    }

    static func freePort() throws -> Int {
        let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        CachetSocket.close(fd)
        return port
    }

    @Test func aRequestThatWaitsForTheDiskIsTimedOnceWhenItCompletes() throws {
        let directory = TemporaryDirectory(prefix: "cachet-metrics-disk")
        defer { directory.remove() }
        var node = try NodeProcess(arguments: ["--data-dir", directory.path])
        #expect(try node.connect().roundTrip(.put(key: Array("k".utf8), value: [1], ttl: 0)).status == .ok)
        #expect(node.stop() == 0)
        let httpPort = try Self.freePort()
        node = try NodeProcess(arguments: ["--data-dir", directory.path, "--http-port", "\(httpPort)"])
        let socket = try node.connect()
        // Read from the disk tier (memory is empty after the restart), then from memory.
        #expect(try socket.roundTrip(.get(key: Array("k".utf8))).body == [1])
        #expect(try socket.roundTrip(.get(key: Array("k".utf8))).body == [1])
        let samples = Set(try Self.fetch(httpPort, "/metrics", parse: true).split(separator: "\n").map(String.init))
        #expect(
            samples.contains(#"cachet_request_duration_seconds_count{command="get"} 2"#),
            "\(samples.filter { $0.contains("duration_seconds_count") }.sorted())"
        )
        #expect(samples.contains(#"cachet_disk_hits_total{} 1"#))
    }

    @Test func metricsParseAndMatchStats() throws {
        let httpPort = try Self.freePort()
        let node = try NodeProcess(arguments: ["--http-port", "\(httpPort)", "--disk-limit", "0"])
        let socket = try node.connect()
        for index in 0..<25 {
            #expect(try socket.roundTrip(.put(key: Array("k\(index)".utf8), value: [1, 2, 3], ttl: 0)).status == .ok)
        }
        for index in 0..<40 { _ = try socket.roundTrip(.get(key: Array("k\(index)".utf8))) }
        let stats = try node.stats()
        let samples = Set(try Self.fetch(httpPort, "/metrics", parse: true).split(separator: "\n").map(String.init))
        #expect(samples.contains("cachet_up{} 1"))
        #expect(samples.contains("cachet_current_items{} \(stats["items"] as? Int ?? -1)"), "\(samples.sorted())")
        #expect(samples.contains(#"cachet_commands_total{command="get",status="hit"} 25"#), "\(samples.sorted())")
        #expect(samples.contains(#"cachet_commands_total{command="get",status="miss"} 15"#))
        #expect(samples.contains(#"cachet_commands_total{command="set",status="ok"} 25"#))
        #expect(samples.contains("cachet_current_bytes{} \(stats["memory_bytes"] as? Int ?? -1)"))
        // Every request is timed once, under its command; buckets are cumulative up to +Inf.
        for (command, count) in [("get", 40), ("set", 25), ("delete", 0)] {
            #expect(samples.contains(#"cachet_request_duration_seconds_count{command="\#(command)"} \#(count)"#))
            #expect(
                samples.contains(#"cachet_request_duration_seconds_bucket{command="\#(command)",le="+Inf"} \#(count)"#),
                "\(samples.filter { $0.contains("duration") }.sorted())"
            )
        }
        let getBuckets = samples.filter { $0.hasPrefix(#"cachet_request_duration_seconds_bucket{command="get""#) }
        #expect(getBuckets.count == 16)
        let cumulative = getBuckets.map { line -> (Double, Int) in
            let bound = line.split(separator: "le=\"")[1].prefix { $0 != "\"" }
            return (bound == "+Inf" ? .infinity : Double(bound) ?? -1, Int(line.split(separator: " ").last!) ?? -1)
        }.sorted { $0.0 < $1.0 }.map(\.1)
        #expect(cumulative == cumulative.sorted() && cumulative.last == 40, "\(cumulative)")
        #expect(try Self.fetch(httpPort, "/health/live", parse: false).hasPrefix("200"))
        #expect(try Self.fetch(httpPort, "/health/ready", parse: false).hasPrefix("200 serving"))
        // A graceful stop logs no error (the HTTP server's run ends as asked).
        #expect(node.stop() == 0)
        let errors = node.log.split(separator: "\n").filter { $0.contains("error") || $0.contains("Cancellation") }
        #expect(errors.isEmpty, "a graceful stop logged: \(errors)")
    }

    /// A member stopped and resumed holds its keys for its hold period: not ready meanwhile, ready after.
    @Test func readinessIsFalseWhileAMemberHolds() throws {
        let directory = TemporaryDirectory(prefix: "cachet-metrics")
        defer { directory.remove() }
        let ports = try (0..<2).map { _ in try Self.freePort() }
        let file = directory.appending("cluster.json")
        let entries = ports.enumerated().map { "{\"id\": \"n\($0 + 1)\", \"host\": \"127.0.0.1\", \"port\": \($1)}" }
        try Data(("{\"members\": [" + entries.joined(separator: ", ") + "]}\n").utf8)
            .write(to: URL(fileURLWithPath: file))
        let httpPort = try Self.freePort()
        let n1 = try NodeProcess(arguments: [
            "--cluster", file, "--node-id", "n1", "--port", "\(ports[0])", "--http-port", "\(httpPort)",
            "--probe-interval", "0.1", "--forward-timeout", "0.3", "--hold-period", "2", "--hold-full-period",
            "--disk-limit", "0",
        ])
        let n2 = try NodeProcess(arguments: [
            "--cluster", file, "--node-id", "n2", "--port", "\(ports[1])", "--probe-interval", "0.1",
            "--forward-timeout", "0.3", "--disk-limit", "0",
        ])
        _ = n2
        // Settled: ready.
        var ready = ""
        let settled = Date().addingTimeInterval(10)
        repeat {
            ready = try Self.fetch(httpPort, "/health/ready", parse: false)
            if !ready.hasPrefix("200") { Thread.sleep(forTimeInterval: 0.1) }
        } while !ready.hasPrefix("200") && Date() < settled
        #expect(ready.hasPrefix("200"), "\(ready)")
        // Stopped past its stall threshold, then resumed: it holds, and says so.
        let pid = n1.process.processIdentifier
        #expect(freeze(pid))
        Thread.sleep(forTimeInterval: 0.8)
        kill(pid, SIGCONT)
        let holding = try Self.fetch(httpPort, "/health/ready", parse: false)
        #expect(holding.hasPrefix("503 holding"), "\(holding)")
        let samples = try Self.fetch(httpPort, "/metrics", parse: true)
        #expect(samples.contains("cachet_holding{} 1"))
        #expect(samples.contains("cachet_holds_released_total{} 0"), "--hold-full-period: never released early")
        #expect(samples.contains(#"cachet_cluster_member_state{member="n2",state="up"}"#))
        // The probes n1 sent n2, answered.
        #expect(samples.contains(#"cachet_forward_outcomes_total{member="n2",outcome="answered"}"#), "\(samples)")
        // Ready again once the hold is over.
        let over = Date().addingTimeInterval(10)
        repeat {
            ready = try Self.fetch(httpPort, "/health/ready", parse: false)
            if !ready.hasPrefix("200") { Thread.sleep(forTimeInterval: 0.1) }
        } while !ready.hasPrefix("200") && Date() < over
        #expect(ready.hasPrefix("200"), "\(ready)")
    }
}
