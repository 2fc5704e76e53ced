import CachetTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Other projects' tests of memcached's protocol, run against a node's memcached port: they check what their
/// authors think memcached does (`docs/memcached.md`, "Peer suites"). pymemcache's integration tests
/// (Debian's `python3-pymemcache`, with its TLS tests on the node's memcached TLS port), against a node and
/// through one member of a 3-node cluster; libmemcached's conformance run (`memccapable -a`) and its tools;
/// memcached's own `t/` tests (`Tests/PeerSuites/memcached`), text and meta protocols, each file against a fresh
/// node.
@Suite("Node: memcached's peer suites", .dedicatedThreads)
struct MemcachePeerSuiteTests {
    /// Where Debian installs pymemcache's tests.
    static let pymemcacheTests = "/usr/lib/python3/dist-packages/pymemcache/test"

    /// pymemcache's integration tests against `port` (and `tlsPort`, its TLS tests with the CA `ca`), from a
    /// copy of its test directory holding that CA where its TLS fixture looks for one; the output and
    /// whether every test passed or was skipped.
    static func pymemcache(port: Int, tlsPort: Int?, ca: String?) throws -> (output: String, passed: Bool) {
        let copy = TemporaryDirectory(prefix: "cachet-pymemcache")
        defer { copy.remove() }
        let tests = copy.appending("test")
        try FileManager.default.copyItem(atPath: Self.pymemcacheTests, toPath: tests)
        if let ca {
            try FileManager.default.createDirectory(atPath: tests + "/certs", withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: ca, toPath: tests + "/certs/ca-root.crt")
        }
        var arguments = [
            "-m", "pytest", "-q", "-p", "no:cacheprovider", tests + "/test_integration.py", "--server", "127.0.0.1",
            "--port", "\(port)",
        ]
        if let tlsPort {
            arguments += ["--tls-server", "localhost", "--tls-port", "\(tlsPort)"]
        } else {
            arguments += ["-k", "not tls"]
        }
        let (output, status) = try runProcess(NodeMetricsTests.python, arguments)
        let summary = output.split(separator: "\n").last.map(String.init) ?? ""
        return (
            output,
            status == 0 && summary.contains("passed") && !summary.contains("failed") && !summary.contains("error")
        )
    }

    @Test func pymemcachesIntegrationTestsPassAgainstANodeAndOverTLS() throws {
        let certificates = try TestCertificates()
        defer { certificates.remove() }
        let port = try NodeMetricsTests.freePort()
        let tlsPort = try NodeMetricsTests.freePort()
        let node = try NodeProcess(arguments: [
            "--memcached-port", "\(port)", "--memcached-tls-port", "\(tlsPort)", "--tls-cert",
            certificates.serverCertificate, "--tls-key", certificates.serverKey,
        ])
        _ = node
        let (output, passed) = try Self.pymemcache(port: port, tlsPort: tlsPort, ca: certificates.caFile)
        #expect(passed, "\(output.suffix(3000))")
        #expect(!output.contains(" skipped"), "the TLS tests ran: \(output.suffix(500))")
    }

    @Test func pymemcachesIntegrationTestsPassThroughOneMemberOfAThreeNodeCluster() throws {
        let ports = try (0..<3).map { _ in try NodeMetricsTests.freePort() }
        let cluster = try NodeForwardingTests.Cluster()
        // Every member with a memcached port; flush_all empties the cluster, as the suite flushes the one
        // address it knows between tests.
        for (index, id) in ["n1", "n2", "n3"].enumerated() {
            _ = cluster.node(id).stop()
            try cluster.start(
                id,
                extraArguments: ["--memcached-port", "\(ports[index])", "--memcached-flush", "cluster"]
            )
        }
        #expect(try cluster.waitUntilServing(within: 15) == nil)
        let (output, passed) = try Self.pymemcache(port: ports[0], tlsPort: nil, ca: nil)
        #expect(passed, "\(output.suffix(3000))")
        // The keys went to every member, not to the one asked.
        for id in ["n2", "n3"] {
            #expect((try cluster.stats(id)["puts"] as? Int ?? 0) > 0, "\(id) stored some of the suite's keys")
        }
    }

    @Test func libmemcachedsConformanceRunAndToolsWork() throws {
        let port = try NodeMetricsTests.freePort()
        let directory = TemporaryDirectory(prefix: "cachet-libmemcached")
        defer { directory.remove() }
        let node = try NodeProcess(arguments: [
            "--memcached-port", "\(port)", "--data-dir", directory.appending("data"), "--disk-limit", "64MiB",
        ])
        _ = node
        let server = "--servers=127.0.0.1:\(port)"
        let (capable, capableStatus) = try runProcess(
            "/usr/bin/memccapable",
            ["-h", "127.0.0.1", "-p", "\(port)", "-a"]
        )
        #expect(capableStatus == 0 && capable.contains("All tests passed"), "\(capable)")
        // A file copied in, read back, removed; the node's stats; a flush; a short load.
        let file = directory.appending("greeting.txt")
        try Data("hello from libmemcached\n".utf8).write(to: URL(fileURLWithPath: file))
        #expect(try runProcess("/usr/bin/memccp", [server, file]).status == 0)
        let (cat, catStatus) = try runProcess("/usr/bin/memccat", [server, "greeting.txt"])
        #expect(catStatus == 0 && cat.hasPrefix("hello from libmemcached"), "\(cat)")
        #expect(try runProcess("/usr/bin/memcrm", [server, "greeting.txt"]).status == 0)
        #expect(try runProcess("/usr/bin/memccat", [server, "greeting.txt"]).status != 0, "removed")
        let (stat, statStatus) = try runProcess("/usr/bin/memcstat", [server])
        #expect(statStatus == 0 && stat.contains("curr_items") && stat.contains("version: 1.6.0"), "\(stat)")
        #expect(try runProcess("/usr/bin/memcflush", [server]).status == 0)
        let (slap, slapStatus) = try runProcess(
            "/usr/bin/memcslap",
            [server, "--concurrency=4", "--execute-number=500", "--test=set"]
        )
        #expect(slapStatus == 0 && slap.contains("Time to set"), "\(slap)")
    }

    @Test func memcachedsOwnProtocolTestsPass() throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("PeerSuites/memcached/run.sh").path
        let readme = try String(
            contentsOfFile: script.replacingOccurrences(of: "run.sh", with: "README.md"),
            encoding: .utf8
        )
        let listed = readme.split(separator: "\n").filter { $0.contains("| yes |") }.count
        let (output, status) = try runProcess("/bin/bash", [script, BuiltProducts.path(of: "cachet-node")])
        let passed = output.split(separator: "\n").filter { $0.hasPrefix("ok   t/") }.count
        #expect(status == 0 && passed == listed && listed >= 20, "\(output)")
    }
}
