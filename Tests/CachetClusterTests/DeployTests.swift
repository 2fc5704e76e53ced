import CachetCluster
import CachetIO
import CachetTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The files of `deploy/` that cannot run here (systemd, container, Kubernetes) parse and agree with the
/// node's flags; the local cluster script runs for real.
@Suite("Deploy files", .dedicatedThreads)
struct DeployTests {
    @Test func theNodesHelpListsTheFlagsTheDeployFilesNeed() {
        for flag in ["--cluster", "--node-id", "--host", "--port", "--data-dir", "--memory-limit", "--disk-limit"] {
            #expect(DeployFiles.nodeFlags.contains(flag), "cachet-node --help lacks \(flag)")
        }
    }

    /// The `--flags` of a command line given as words, which must all be cachet-node's.
    static func expectNodeFlags(_ words: [String], in file: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let used = words.filter { $0.hasPrefix("--") }
        #expect(!used.isEmpty, "\(file) starts cachet-node without flags", sourceLocation: sourceLocation)
        for flag in used {
            #expect(
                DeployFiles.nodeFlags.contains(flag),
                "\(file) uses \(flag), which cachet-node --help does not list",
                sourceLocation: sourceLocation
            )
        }
    }

    // MARK: - systemd

    @Test(arguments: ["deploy/systemd/cachet@.service", "deploy/systemd/cachet-node.service"])
    func aSystemdUnitParsesAndUsesOnlyTheNodesFlags(_ file: String) throws {
        let text = try DeployFiles.text(file)
        var sections: [String: [String: [String]]] = [:]
        var section = ""
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                section = String(line.dropFirst().dropLast())
                continue
            }
            guard let equals = line.firstIndex(of: "="), !section.isEmpty else {
                Issue.record("\(file):\(number + 1) is neither a [Section] nor Key=Value: \(line)")
                continue
            }
            sections[section, default: [:]][String(line[..<equals]), default: []].append(
                String(line[line.index(after: equals)...])
            )
        }
        #expect(Set(sections.keys) == ["Unit", "Service", "Install"])
        let service = sections["Service"] ?? [:]
        let start = try #require(service["ExecStart"]?.first)
        let words = start.split(separator: " ").map(String.init)
        #expect(words.first == "/usr/local/bin/cachet-node")
        Self.expectNodeFlags(words, in: file)
        #expect(service["KillSignal"] == ["SIGTERM"])
        if file.hasSuffix("cachet@.service") {
            // The instance is the node id; reload is SIGHUP; every instance has its own data directory.
            let nodeID = words.firstIndex(of: "--node-id").map { words[$0 + 1] }
            #expect(nodeID == "%i")
            #expect(words.contains("--cluster"))
            #expect(words.firstIndex(of: "--data-dir").map { words[$0 + 1] }?.contains("%i") == true)
            #expect(service["ExecReload"] == ["/bin/kill -HUP $MAINPID"])
        }
    }

    // MARK: - Container

    @Test func theContainerFileIsMultiStageWithOnlyTheRuntimeInTheFinalImage() throws {
        let text = try DeployFiles.text("deploy/container/Dockerfile")
        // Instructions, with continuation lines joined.
        var instructions: [String] = []
        var pending = ""
        for raw in text.split(separator: "\n") {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if pending.isEmpty && (line.isEmpty || line.hasPrefix("#")) { continue }
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
            } else {
                instructions.append(pending + line)
                pending = ""
            }
        }
        let known: Set<String> = [
            "ARG", "FROM", "RUN", "WORKDIR", "COPY", "USER", "VOLUME", "EXPOSE", "STOPSIGNAL", "HEALTHCHECK",
            "ENTRYPOINT", "CMD", "ENV", "LABEL",
        ]
        for instruction in instructions {
            let keyword = String(instruction.prefix { $0 != " " })
            #expect(known.contains(keyword), "unknown instruction: \(instruction)")
        }
        let stages = instructions.filter { $0.hasPrefix("FROM ") }
        #expect(stages.count == 2)
        #expect(stages.first?.hasSuffix(" AS build") == true)
        let args = Dictionary(
            instructions.filter { $0.hasPrefix("ARG ") }.compactMap { line -> (String, String)? in
                let pair = line.dropFirst(4).split(separator: "=", maxSplits: 1).map(String.init)
                return pair.count == 2 ? (pair[0], pair[1]) : nil
            },
            uniquingKeysWith: { $1 }
        )
        #expect(args["SWIFT_IMAGE"]?.hasPrefix("swift:6.") == true, "the builder is a Swift 6 image")
        let runtime = try #require(args["RUNTIME_IMAGE"])
        #expect(runtime.hasPrefix("debian:") && runtime.hasSuffix("-slim"), "the final image is a slim Debian")
        #expect(stages.last == "FROM ${RUNTIME_IMAGE}")
        let final = instructions.drop { $0 != stages.last }
        #expect(!final.contains { $0.contains("swift ") }, "no toolchain in the final stage")
        #expect(
            final.contains {
                $0.hasPrefix("COPY --from=build ") && $0.contains("cachet-node") && $0.contains("cachet-cli")
            }
        )
        #expect(instructions.contains { $0.contains("--static-swift-stdlib") })

        func jsonArray(_ keyword: String) throws -> [String] {
            let line = try #require(instructions.first { $0.hasPrefix(keyword + " ") })
            let json = line.dropFirst(keyword.count + 1).drop { $0 != "[" }
            return try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String])
        }
        #expect(try jsonArray("ENTRYPOINT") == ["cachet-node"])
        Self.expectNodeFlags(try jsonArray("CMD"), in: "deploy/container/Dockerfile CMD")
        #expect(try jsonArray("HEALTHCHECK").first == "cachet-cli")
    }

    // MARK: - Kubernetes

    static let manifests = [
        "deploy/kubernetes/service.yaml", "deploy/kubernetes/configmap.yaml", "deploy/kubernetes/statefulset.yaml",
        "deploy/kubernetes/poddisruptionbudget.yaml", "deploy/kubernetes/kustomization.yaml",
    ]

    /// The flow list (`key: ["a", "b"]`) on the line of `key` in a manifest, read as JSON.
    static func flowList(_ key: String, in file: String) throws -> [String] {
        let text = try DeployFiles.text(file)
        let line = try #require(
            text.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix(key + ":") }
        )
        let json = line.drop { $0 != "[" }
        return try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String])
    }

    @Test func theManifestsAreYAMLWithoutTabsAndTheNodeArgumentsAreItsFlags() throws {
        // Holds without PyYAML: the StatefulSet's arguments are one flow list of JSON strings.
        for file in Self.manifests {
            #expect(!(try DeployFiles.text(file)).contains("\t"), "\(file) has a tab, which YAML refuses")
        }
        Self.expectNodeFlags(
            try Self.flowList("args", in: "deploy/kubernetes/statefulset.yaml"),
            in: "statefulset.yaml"
        )
        let kustomization = try DeployFiles.text("deploy/kubernetes/kustomization.yaml")
        for file in Self.manifests where !file.hasSuffix("kustomization.yaml") {
            #expect(kustomization.contains("- " + URL(fileURLWithPath: file).lastPathComponent))
        }
    }

    @Test(
        .enabled(if: DeployFiles.pyYAMLAvailable, "python3 with PyYAML is not installed: the manifests are not parsed")
    )
    func theManifestsDescribeOneConsistentCluster() throws {
        let documents = try DeployFiles.yamlDocuments(Self.manifests)
        func only(_ kind: String) throws -> [String: Any] {
            let matching = documents.filter { $0["kind"] as? String == kind }
            #expect(matching.count == 1, "one \(kind)")
            return try #require(matching.first)
        }
        func dictionary(_ value: Any?, _ path: String...) -> [String: Any] {
            var current = value
            for key in path { current = (current as? [String: Any])?[key] }
            return current as? [String: Any] ?? [:]
        }
        let set = try only("StatefulSet")
        let service = try only("Service")
        let budget = try only("PodDisruptionBudget")
        let config = try only("ConfigMap")

        let spec = dictionary(set, "spec")
        let serviceName = try #require(spec["serviceName"] as? String)
        let replicas = try #require(spec["replicas"] as? Int)
        let podLabels = dictionary(spec, "template", "metadata", "labels")
        #expect(dictionary(spec, "selector", "matchLabels") as NSDictionary == podLabels as NSDictionary)

        // The headless Service names the pods.
        #expect(dictionary(service, "metadata")["name"] as? String == serviceName)
        #expect(dictionary(service, "spec")["clusterIP"] as? String == "None")
        #expect(dictionary(service, "spec", "selector") as NSDictionary == podLabels as NSDictionary)
        #expect(dictionary(service, "spec")["publishNotReadyAddresses"] as? Bool == true)

        // The budget covers the pods and lets one go at a time.
        #expect(dictionary(budget, "spec", "selector", "matchLabels") as NSDictionary == podLabels as NSDictionary)
        #expect(dictionary(budget, "spec")["maxUnavailable"] as? Int == 1)

        let podSpec = dictionary(spec, "template", "spec")
        let containers = podSpec["containers"] as? [[String: Any]] ?? []
        let container = try #require(containers.first)
        let args = try #require(container["args"] as? [String])
        Self.expectNodeFlags(args, in: "statefulset.yaml")
        func value(of flag: String) -> String? {
            args.firstIndex(of: flag).flatMap { $0 + 1 < args.count ? args[$0 + 1] : nil }
        }
        // The node id is the pod's name.
        #expect(value(of: "--node-id") == "$(POD_NAME)")
        // The grace period leaves the node its whole --shutdown-timeout (default 10 s) and some.
        let shutdown = Double(value(of: "--shutdown-timeout") ?? "10") ?? 10
        let grace = try #require(podSpec["terminationGracePeriodSeconds"] as? Int)
        #expect(Double(grace) >= shutdown + 5, "grace \(grace) s for a --shutdown-timeout of \(shutdown) s")
        // The README's resident-memory bound fits the container's limit: the store, its pool of freed large
        // blocks (a sixteenth), connection memory (a quarter by default), the disk queue (16 MiB), the
        // process (25 MiB) and 8.5 KiB for each of a thousand connections.
        let memoryFlag = try #require(value(of: "--memory-limit"))
        let memoryLimit = try #require(Int(memoryFlag.dropLast(3))) << (memoryFlag.hasSuffix("GiB") ? 30 : 20)
        let resident = memoryLimit + memoryLimit / 16 + memoryLimit / 4 + (16 << 20) + (25 << 20) + 1000 * 8704
        let limits = dictionary(container, "resources", "limits")
        let containerLimit = try #require(limits["memory"] as? String)
        #expect(containerLimit == "1Gi" && resident <= 1 << 30, "\(resident) bytes resident under \(containerLimit)")
        let env = container["env"] as? [[String: Any]] ?? []
        let podName = env.first { $0["name"] as? String == "POD_NAME" }
        #expect(dictionary(podName, "valueFrom", "fieldRef")["fieldPath"] as? String == "metadata.name")

        // The cluster file is the ConfigMap's, mounted where --cluster says.
        let clusterPath = try #require(value(of: "--cluster"))
        let mounts = container["volumeMounts"] as? [[String: Any]] ?? []
        let volumes = podSpec["volumes"] as? [[String: Any]] ?? []
        let configName = try #require(dictionary(config, "metadata")["name"] as? String)
        let configVolume = try #require(volumes.first { dictionary($0, "configMap")["name"] as? String == configName })
        let configMount = try #require(mounts.first { $0["name"] as? String == configVolume["name"] as? String })
        let mountPath = try #require(configMount["mountPath"] as? String)
        let fileName = URL(fileURLWithPath: clusterPath).lastPathComponent
        #expect(URL(fileURLWithPath: clusterPath).deletingLastPathComponent().path == mountPath)
        #expect(configMount["subPath"] == nil, "a subPath mount is never updated, so SIGHUP could not reload it")
        let clusterJSON = try #require(dictionary(config, "data")[fileName] as? String)
        let membership = try CachetMembership(json: Array(clusterJSON.utf8))

        // One member per pod: named by the pod, at its DNS name under the headless Service, on the node's port.
        let ports = container["ports"] as? [[String: Any]] ?? []
        let port = try #require(ports.first?["containerPort"] as? Int)
        #expect(value(of: "--port").flatMap { Int($0) } ?? port == port)
        let expected = (0..<replicas).map {
            CachetClusterMember(id: "cachet-\($0)", host: "cachet-\($0).\(serviceName)", port: port)
        }
        #expect(membership.members == expected)
        #expect(dictionary(set, "metadata")["name"] as? String == "cachet", "pod names are cachet-N")
        // A DNS name is not an address to listen on: the node is told where.
        #expect(value(of: "--host") == "0.0.0.0")

        // Readiness means serving its keys: the node's /health/ready, on its --http-port.
        let readiness = dictionary(container, "readinessProbe", "httpGet")
        #expect(readiness["path"] as? String == "/health/ready")
        let http = ports.first { $0["name"] as? String == readiness["port"] as? String }?["containerPort"] as? Int
        #expect(http != nil && value(of: "--http-port").flatMap { Int($0) } == http)
        #expect(value(of: "--http-host") == "0.0.0.0")
        #expect(dictionary(container, "livenessProbe", "httpGet")["path"] as? String == "/health/live")
        let dataMount = mounts.first { $0["name"] as? String == "data" }
        #expect(dataMount?["mountPath"] as? String == value(of: "--data-dir"))
        let claims = spec["volumeClaimTemplates"] as? [[String: Any]] ?? []
        #expect(claims.contains { dictionary($0, "metadata")["name"] as? String == "data" })
    }

    /// The Grafana dashboard is JSON whose every query names only metrics the node exports.
    @Test func theDashboardChartsOnlyMetricsTheNodeExports() throws {
        let text = try DeployFiles.text("deploy/grafana/cachet-dashboard.json")
        let dashboard = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        let panels = dashboard["panels"] as? [[String: Any]] ?? []
        #expect(panels.count >= 10)
        let exported = try DeployFiles.text("Sources/CachetNode/Metrics/NodeStatistics+Prometheus.swift")
        var charted = Set<String>()
        for panel in panels {
            for target in panel["targets"] as? [[String: Any]] ?? [] {
                let expression = target["expr"] as? String ?? ""
                var rest = Substring(expression)
                while let start = rest.range(of: "cachet_") {
                    var name = String(rest[start.lowerBound...].prefix { $0.isLetter || $0 == "_" })
                    // A histogram's series are its name with `_bucket`, `_sum` or `_count`.
                    if name.hasSuffix("_seconds_bucket") { name.removeLast("_bucket".count) }
                    charted.insert(name)
                    rest = rest[start.upperBound...]
                }
            }
        }
        #expect(charted.count >= 15)
        for name in charted {
            #expect(exported.contains("\"\(name)\""), "the dashboard charts \(name), which the node does not export")
        }
    }

    @Test func theReadinessProbesPathAnswersOnlyWhileTheNodeServes() throws {
        let (fd, httpPort) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        close(fd)
        let node = try NodeProcess(arguments: ["--disk-limit", "0", "--http-port", "\(httpPort)"])
        let probe = [
            "-c",
            "import urllib.request; urllib.request.urlopen('http://127.0.0.1:\(httpPort)/health/ready', timeout=3)",
        ]
        let serving = try DeployFiles.run("/usr/bin/python3", probe, timeout: 30)
        #expect(serving.status == 0, "\(serving.output) \(serving.error)")
        #expect(node.stop() == 0)
        let stopped = try DeployFiles.run("/usr/bin/python3", probe, timeout: 30)
        #expect(stopped.status != 0)
    }

    // MARK: - Scripts

    @Test(arguments: ["deploy/local-cluster.sh", "deploy/cachet-local.sh"])
    func aScriptStartsNodesWithTheirFlagsOnly(_ file: String) throws {
        let text = try DeployFiles.text(file)
        let starts = text.split(separator: "\n").filter {
            $0.contains("\"$node_bin\" --") || $0.contains("\"$binary\" --")
        }
        #expect(!starts.isEmpty)
        for line in starts {
            for flag in DeployFiles.flags(in: String(line)) {
                #expect(DeployFiles.nodeFlags.contains(flag), "\(file) starts cachet-node with \(flag)")
            }
        }
        let syntax = try DeployFiles.run("/bin/bash", ["-n", DeployFiles.path(file)], timeout: 30)
        #expect(syntax.status == 0, "\(syntax.error)")
    }

    /// A first port of `count` consecutive free ports below the ephemeral range.
    static func freePorts(_ count: Int) -> Int? {
        func free(_ port: Int) -> Bool {
            guard let (fd, _) = try? CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: port)) else {
                return false
            }
            close(fd)
            return true
        }
        for _ in 0..<50 {
            let base = Int.random(in: 20_000...30_000)
            if (base..<base + count).allSatisfy(free) { return base }
        }
        return nil
    }

    @Test func theLocalClusterScriptStartsReportsAndStopsNodes() throws {
        let directory = TemporaryDirectory(prefix: "cachet-local-cluster")
        let folder = directory.appending("cluster")
        let script = DeployFiles.path("deploy/local-cluster.sh")
        let environment = ["CACHET_BIN_DIR": BuiltProducts.directory, "CACHET_CLUSTER_DIR": folder]
        func run(_ arguments: [String]) throws -> DeployFiles.Outcome {
            try DeployFiles.run("/bin/bash", [script] + arguments, environment: environment, timeout: 90)
        }
        defer { _ = try? run(["down", "--purge"]) }
        let base = try #require(Self.freePorts(3))

        // Probes every 0.2 s: a returning member holds for ten of them, so the rolling restart below is short.
        let up = try run([
            "up", "3", "--port", "\(base)", "--", "--disk-limit", "0", "--memory-limit", "16MiB", "--probe-interval",
            "0.2",
        ])
        #expect(up.status == 0, "\(up.output)\n\(up.error)")
        #expect(up.output.contains("cachet-cli --port \(base) stats"))
        let membership = try CachetMembership(contentsOfFile: folder + "/cluster.json")
        #expect(membership.members.map(\.id) == ["n1", "n2", "n3"])
        #expect(membership.members.map(\.port) == [base, base + 1, base + 2])

        // A value put through one node shows in that node's items.
        let cli = BuiltProducts.path(of: "cachet-cli")
        #expect(try DeployFiles.run(cli, ["--port", "\(base + 1)", "put", "k", "v"]).status == 0)
        let status = try run(["status"])
        #expect(status.status == 0, "\(status.output)\n\(status.error)")
        let rows = status.output.split(separator: "\n").filter { $0.hasPrefix("n") }.map { $0.split(separator: " ") }
        #expect(rows.map { String($0[0]) } == ["n1", "n2", "n3"])
        #expect(rows.allSatisfy { $0[3] == "up" && $0[5] == membership.membershipHashText[...] })
        // Each node's /health/ready, on the HTTP port it printed.
        #expect(rows.allSatisfy { $0.count > 6 && $0[6] == "ready" }, "\(status.output)")
        #expect(rows.map { String($0[4]) } == ["0", "1", "0"])

        // Up again: already up, nothing started.
        let again = try run(["up", "3", "--port", "\(base)"])
        #expect(again.status == 0 && again.output.contains("already up"))
        let other = try run(["up", "5"])
        #expect(other.status == 1 && other.error.contains("already running"))

        // One node stopped, started and restarted on its own, with the flags the cluster was started with.
        let stop = try run(["stop", "n2"])
        #expect(
            stop.status == 0 && stop.output.contains("n2 (pid") && stop.output.contains("stopped"),
            "\(stop.output)"
        )
        let stopped = try run(["status"])
        #expect(stopped.status == 1 && stopped.output.contains("stopped"), "\(stopped.output)")
        let start = try run(["start", "n2"])
        #expect(start.status == 0 && start.output.contains("n2 started on 127.0.0.1:\(base + 1)"), "\(start.output)")
        let restart = try run(["restart", "n3"])
        #expect(restart.status == 0 && restart.output.contains("n3 started"), "\(restart.output)\n\(restart.error)")
        let unknown = try run(["stop", "n9"])
        #expect(unknown.status == 1 && unknown.error.contains("no node n9"), "\(unknown.error)")
        #expect(try run(["status"]).status == 0, "every node is up again")
        // Every node in turn, each once the others see it back and it holds no more.
        let rolling = try run(["rolling-restart", "--pause", "0"])
        #expect(rolling.status == 0, "\(rolling.output)\n\(rolling.error)")
        #expect(
            ["n1", "n2", "n3"].allSatisfy { rolling.output.contains("\($0) rejoined") }
                && rolling.output.contains("rolling restart done"),
            "\(rolling.output)"
        )
        let rollingUnknown = try run(["rolling-restart", "n9"])
        #expect(rollingUnknown.status == 1 && rollingUnknown.error.contains("no node n9"), "\(rollingUnknown.error)")
        let flags = try String(contentsOfFile: folder + "/node-flags", encoding: .utf8)
        #expect(flags.contains("--memory-limit"), "the nodes' flags are kept for start and restart")

        let down = try run(["down"])
        #expect(down.status == 0, "\(down.output)\n\(down.error)")
        #expect(down.output.split(separator: "\n").filter { $0.hasSuffix(" stopped") }.count == 3)
        let afterDown = try run(["status"])
        #expect(afterDown.status == 1 && afterDown.output.contains("stopped"))
        #expect(FileManager.default.fileExists(atPath: folder + "/n1/data"), "down keeps the data")
        #expect(try run(["down"]).output.contains("no local cluster is running"))
        #expect(try run(["down", "--purge"]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: folder))
    }
}
