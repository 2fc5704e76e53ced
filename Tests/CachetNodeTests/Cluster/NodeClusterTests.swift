import CachetCluster
import CachetIO
import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `--cluster FILE --node-id ID`, the cluster of one, SIGHUP and STATS, on real node processes.
@Suite("Node: cluster membership", .dedicatedThreads)
struct NodeClusterTests {
    /// Writes `text` to `path` the way a careful operator (or a ConfigMap) does: a new file renamed over the old.
    static func write(_ text: String, to path: String) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    static func members(_ ids: [String], firstPort: Int = 17420) -> String {
        let entries = ids.enumerated().map { index, id in
            "{\"id\": \"\(id)\", \"host\": \"127.0.0.1\", \"port\": \(firstPort + index)}"
        }
        return "{\"members\": [\n  " + entries.joined(separator: ",\n  ") + "\n]}\n"
    }

    static func stats(_ node: NodeProcess) throws -> [String: Any] { try node.stats() }

    /// Polls STATS until `condition` holds, for at most `timeout` seconds.
    static func waitForStats(
        _ node: NodeProcess,
        timeout: Double = 10,
        until condition: ([String: Any]) -> Bool
    ) throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(timeout)
        var last = try stats(node)
        while !condition(last) && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
            last = try stats(node)
        }
        return last
    }

    /// Polls the node's log until it contains `text`, for at most `timeout` seconds: the node counts a reload
    /// in STATS before it writes the reload's log line.
    static func waitForLog(_ node: NodeProcess, toContain text: String, timeout: Double = 10) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !node.log.contains(text) {
            if Date() >= deadline { return false }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return true
    }

    static func memberStates(_ stats: [String: Any]) -> [String: String] {
        var states: [String: String] = [:]
        for member in stats["cluster_members"] as? [[String: Any]] ?? [] {
            states[member["id"] as! String] = member["state"] as? String
        }
        return states
    }

    @Test func aClusterNodeReportsItsIdTheMembershipHashAndTheMembers() throws {
        let directory = TemporaryDirectory(prefix: "cachet-cluster-node")
        let file = directory.appending("cluster.json")
        try Self.write(Self.members(["n1", "n2", "n3"]), to: file)
        // Alone, it is in the minority from its first greeting of the peers: the opt-out lets it serve its own
        // keys all the same.
        let node = try NodeProcess(arguments: ["--cluster", file, "--node-id", "n2", "--serve-own-keys-in-minority"])
        let stats = try Self.stats(node)
        #expect(stats["node_id"] as? String == "n2")
        #expect(stats["cluster_hash"] as? String == (try CachetMembership(contentsOfFile: file)).membershipHashText)
        #expect(stats["cluster_file"] as? String == file)
        #expect(stats["cluster_virtual_nodes"] as? Int == 160)
        // Peers are greeted at the start, then probed: none runs here, so each is down or suspect, or up
        // until its first probe fails.
        let states = Self.memberStates(stats)
        #expect(states["n2"] == "self")
        #expect(["n1", "n3"].allSatisfy { ["up", "suspect", "down"].contains(states[$0] ?? "") }, "\(states)")
        let members = stats["cluster_members"] as? [[String: Any]] ?? []
        #expect(members.map { $0["port"] as? Int } == [17420, 17421, 17422])
        #expect(members.allSatisfy { $0["host"] as? String == "127.0.0.1" })
        // It serves its own keys (the others' go to their owners: NodeForwardingTests).
        let membership = try CachetMembership(contentsOfFile: file)
        let own = (0...).lazy.map { "k\($0)" }.first { membership.owner(of: $0).id == "n2" }!
        #expect(try node.connect().roundTrip(.put(key: Array(own.utf8), value: [1], ttl: 0)).status == .ok)
        #expect(node.log.contains("node.id=n2"))
        #expect(node.stop() == 0)
    }

    @Test func aNodeListensOnItsMembersAddressUnlessTold() throws {
        // A free port, then a cluster file that gives it to the node: no --host or --port at all.
        let (probe, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        close(probe)

        let directory = TemporaryDirectory(prefix: "cachet-cluster-node")
        let file = directory.appending("cluster.json")
        try Self.write(
            "{\"members\": [{\"id\": \"a\", \"host\": \"127.0.0.1\", \"port\": \(port)}, "
                + "{\"id\": \"b\", \"host\": \"127.0.0.1\", \"port\": \(port == 65535 ? port - 1 : port + 1)}]}",
            to: file
        )
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-node"))
        process.arguments = ["--cluster", file, "--node-id", "a", "--data-dir", directory.appending("data")]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer {
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
        var line: [UInt8] = []
        let deadline = Date().addingTimeInterval(20)
        let fd = output.fileHandleForReading.fileDescriptor
        while Date() < deadline && line.last != UInt8(ascii: "\n") {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 100) > 0 else { continue }
            var byte: UInt8 = 0
            guard read(fd, &byte, 1) == 1 else { break }
            line.append(byte)
        }
        #expect(String(decoding: line, as: UTF8.self) == "cachet-node listening on 127.0.0.1:\(port)\n")
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
    }

    @Test func aNodeIdThatIsNotInTheFileIsAStartupError() throws {
        let directory = TemporaryDirectory(prefix: "cachet-cluster-node")
        let file = directory.appending("cluster.json")
        try Self.write(Self.members(["n1", "n2"]), to: file)
        #expect {
            _ = try NodeProcess(arguments: ["--cluster", file, "--node-id", "n7"], timeout: 20)
        } throws: { error in
            let text = "\(error)"
            return text.contains("--node-id n7 is not a member of cluster file \(file)") && text.contains("\"n1\"")
        }
        #expect {
            _ = try NodeProcess(arguments: ["--cluster", file], timeout: 20)
        } throws: { error in
            "\(error)".contains("needs --node-id")
        }
        try Self.write("{\"members\": [{\"id\": \"n1\", \"host\": \"127.0.0.1\"}]}", to: file)
        #expect {
            _ = try NodeProcess(arguments: ["--cluster", file, "--node-id", "n1"], timeout: 20)
        } throws: { error in
            "\(error)".contains("cluster file \(file): members[0] (line 1): no \"port\"")
        }
        #expect {
            _ = try NodeProcess(arguments: ["--cluster", directory.appending("absent.json"), "--node-id", "n1"])
        } throws: { error in
            "\(error)".contains("cannot read cluster file") && "\(error)".contains("No such file or directory")
        }
    }

    @Test func withoutAClusterFileANodeIsAClusterOfOne() throws {
        let node = try NodeProcess()
        let stats = try Self.stats(node)
        let id = "127.0.0.1:\(node.port)"
        #expect(stats["node_id"] as? String == id)
        #expect(Self.memberStates(stats) == [id: "self"])
        let single = try CachetMembership(members: [CachetClusterMember(host: "127.0.0.1", port: node.port)])
        #expect(stats["cluster_hash"] as? String == single.membershipHashText)
        #expect(stats["cluster_file"] as? String == "")
        // SIGHUP neither stops it nor changes anything.
        kill(node.process.processIdentifier, SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while !node.log.contains("SIGHUP ignored") && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        #expect(node.log.contains("SIGHUP ignored"))
        #expect(try Self.stats(node)["cluster_hash"] as? String == single.membershipHashText)
        #expect(node.stop() == 0)

        let named = try NodeProcess(arguments: ["--node-id", "solo"])
        #expect(try Self.stats(named)["node_id"] as? String == "solo")
        #expect(named.stop() == 0)
    }

    @Test func sighupPutsAGoodFileInForceAndRefusesABadOne() throws {
        let directory = TemporaryDirectory(prefix: "cachet-cluster-node")
        let file = directory.appending("cluster.json")
        try Self.write(Self.members(["n1", "n2", "n3"]), to: file)
        // None of the other members runs, so the node is in the minority: it serves its own keys (checked at the
        // end) only with the minority rule turned off.
        let node = try NodeProcess(arguments: [
            "--cluster", file, "--node-id", "n1", "--serve-own-keys-in-minority",
        ])
        let first = try Self.stats(node)["cluster_hash"] as! String
        let pid = node.process.processIdentifier

        // A good file with a fourth member: in force once the reload is counted.
        try Self.write(Self.members(["n1", "n2", "n3", "n4"]), to: file)
        let second = try CachetMembership(contentsOfFile: file).membershipHashText
        #expect(second != first)
        kill(pid, SIGHUP)
        var stats = try Self.waitForStats(node) { $0["cluster_reloads"] as? Int == 1 }
        #expect(stats["cluster_reloads"] as? Int == 1)
        #expect(stats["cluster_hash"] as? String == second)
        #expect(Self.memberStates(stats).keys.sorted() == ["n1", "n2", "n3", "n4"])
        #expect(Self.waitForLog(node, toContain: "cluster membership changed"))
        #expect(Self.waitForLog(node, toContain: "added n4@127.0.0.1:17423"))

        // A file that is not JSON: refused, logged, the membership kept.
        try Self.write("{\"members\": [\n  {\"id\": \"n1\", \"host\": \"127.0.0.1\", \"port\": 17420,}\n]}", to: file)
        kill(pid, SIGHUP)
        stats = try Self.waitForStats(node) { $0["cluster_reload_failures"] as? Int == 1 }
        #expect(stats["cluster_reload_failures"] as? Int == 1)
        #expect(stats["cluster_hash"] as? String == second)
        #expect(Self.waitForLog(node, toContain: "cluster file refused; keeping the old membership"))
        #expect(Self.waitForLog(node, toContain: "not valid JSON at line 2, column 51"))

        // A valid file that no longer lists this node: refused too.
        try Self.write(Self.members(["n2", "n3"], firstPort: 17421), to: file)
        kill(pid, SIGHUP)
        stats = try Self.waitForStats(node) { $0["cluster_reload_failures"] as? Int == 2 }
        #expect(stats["cluster_reload_failures"] as? Int == 2)
        #expect(stats["cluster_hash"] as? String == second)
        #expect(Self.waitForLog(node, toContain: "no longer lists this node"))

        // A file that vanished: refused.
        try FileManager.default.removeItem(atPath: file)
        kill(pid, SIGHUP)
        stats = try Self.waitForStats(node) { $0["cluster_reload_failures"] as? Int == 3 }
        #expect(stats["cluster_reload_failures"] as? Int == 3)
        #expect(Self.waitForLog(node, toContain: "No such file or directory"))

        // The same good file again: reloaded, unchanged.
        try Self.write(Self.members(["n1", "n2", "n3", "n4"]), to: file)
        kill(pid, SIGHUP)
        stats = try Self.waitForStats(node) { $0["cluster_reloads"] as? Int == 2 }
        #expect(stats["cluster_reloads"] as? Int == 2)
        #expect(stats["cluster_hash"] as? String == second)
        #expect(Self.waitForLog(node, toContain: "membership unchanged"))

        // Through it all the node served: its own keys here, and the others' by forwarding them to their
        // owners under the membership in force. None of them runs in this test: the forward is refused, the
        // node counts that owner down and itself in the minority (it reaches one member of four), where it
        // stands in for no one, so the GET misses.
        let membership = try CachetMembership(contentsOfFile: file)
        let own = (0...).lazy.map { "k\($0)" }.first { membership.owner(of: $0).id == "n1" }!
        let foreign = (0...).lazy.map { "k\($0)" }.first { membership.owner(of: $0).id == "n4" }!
        let client = try node.connect()
        #expect(try client.roundTrip(.put(key: Array(own.utf8), value: [7], ttl: 0)).status == .ok)
        #expect(try client.roundTrip(.get(key: Array(own.utf8))).body == [7])
        let forwarded = try client.roundTrip(.get(key: Array(foreign.utf8)))
        #expect(
            forwarded.status == .notFound,
            "\(forwarded.status): \(String(decoding: forwarded.body, as: UTF8.self))"
        )
        #expect(node.stop() == 0)
    }

    @Test func theConfigurationChecksTheNodeIdAgainstTheCluster() throws {
        let directory = TemporaryDirectory(prefix: "cachet-cluster-node")
        let file = directory.appending("cluster.json")
        try Self.write(
            "{\"members\": [{\"id\": \"p0\", \"host\": \"cachet-0.cachet\", \"port\": 7420}, "
                + "{\"id\": \"p1\", \"host\": \"10.0.0.2\", \"port\": 7421}]}",
            to: file
        )
        var configuration = CachetNodeConfiguration()
        #expect(throws: CachetNodeError.self) {
            try configuration.joinCluster(file: file, nodeID: "p0", host: nil, port: nil)
        }
        do {
            try configuration.joinCluster(file: file, nodeID: "p0", host: nil, port: nil)
        } catch {
            #expect(error.message.contains("not an IP address to listen on: give --host"))
        }
        try configuration.joinCluster(file: file, nodeID: "p0", host: "0.0.0.0", port: nil)
        #expect(configuration.host == "0.0.0.0" && configuration.port == 7420 && configuration.nodeID == "p0")
        try configuration.joinCluster(file: file, nodeID: "p1", host: nil, port: 0)
        #expect(configuration.host == "10.0.0.2" && configuration.port == 0)
        try configuration.validate()

        configuration.nodeID = nil
        #expect(throws: CachetNodeError.self) { try configuration.validate() }
        configuration.nodeID = "p9"
        #expect(throws: CachetNodeError.self) { try configuration.validate() }
        configuration.cluster = nil
        configuration.nodeID = "has space"
        #expect(throws: CachetNodeError.self) { try configuration.validate() }
        configuration.nodeID = "fine"
        try configuration.validate()
    }

    @Test func statsQuotesIdsAndHostsAsJSONStrings() throws {
        // Ids may hold quotes, backslashes and non-ASCII text; STATS must stay valid JSON.
        let directory = TemporaryDirectory(prefix: "cachet-cluster-node")
        let file = directory.appending("cluster.json")
        try Self.write(
            #"{"members": [{"id": "we\"ird\\id", "host": "127.0.0.1", "port": 7420}, "#
                + #"{"id": "nœud/🔑", "host": "h\"ost", "port": 7421}]}"#,
            to: file
        )
        try withNode({ configuration in
            try? configuration.joinCluster(file: file, nodeID: "we\"ird\\id", host: "127.0.0.1", port: 0)
        }) { server, _ in
            let stats = try JSONSerialization.jsonObject(with: Data(server.statisticsJSON.utf8)) as! [String: Any]
            #expect(stats["node_id"] as? String == "we\"ird\\id")
            #expect(Self.memberStates(stats)["we\"ird\\id"] == "self")
            #expect(["up", "suspect", "down"].contains(Self.memberStates(stats)["nœud/🔑"] ?? ""))
            let hosts = (stats["cluster_members"] as? [[String: Any]] ?? []).map { $0["host"] as? String }
            #expect(hosts == ["h\"ost", "127.0.0.1"], "in id order")
            #expect(server.membership.nodeID == "we\"ird\\id")
            #expect(server.membership.current.members.count == 2)
        }
    }
}
