import CachetTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A short seeded run of `Benchmarks/register-check.py`, the Jepsen-style check of the cluster's promise
/// (`Protocol/CLUSTER.md`, "Failover without stale reads"): five real `cachet-node` processes on 127.0.0.1,
/// six client threads writing unique values, and a nemesis that kills, terminates and stops nodes and
/// disturbs an owner's stand-in (at most two nodes at once). It fails on any stale, corrupt or impossible
/// read, on a request left without a reply, and when fewer than 85% of the writes are acknowledged (the
/// routine runs in BENCHMARKS.md ask for 95%; a loaded machine running a debug build gets some slack here).
/// The seed fixes the nemesis's choices, not the machine's timing, so a run is a sample, not a replay.
///
/// Seen failing: with `--hold-period 0` (`CACHET_REGISTER_NODE_FLAGS="--hold-period 0"`, flags added to every
/// node) it finds hundreds of stale reads; against the build before this fixes (`CACHET_BIN_DIR`)
/// two thirds of the writes were acknowledged (BENCHMARKS.md, "The cluster's promise under a nemesis").
/// Needs `python3` (3.11 or later).
@Suite("Cluster: a short register check under a nemesis", .serialized, .dedicatedThreads)
struct RegisterCheckTests {
    /// The checker's arguments: 25 s of load with an action about every 2 s, downtimes of 0.8 to 1.6 s.
    static let arguments = [
        "--duration", "25", "--interval", "2", "--pause-min", "0.8", "--pause-max", "1.6", "--seed", "7",
        "--min-ack-ratio", "0.85", "--remove-when-passed",
    ]

    @Test(.timeLimit(.minutes(3)))
    func noStaleReadThroughKillsTerminationsFreezesAndCascades() throws {
        let python = try #require(
            ["/usr/bin/python3", "/usr/local/bin/python3"].first { FileManager.default.isExecutableFile(atPath: $0) }
                ?? Self.onPath("python3"),
            "python3 is needed to run Benchmarks/register-check.py"
        )
        let script = DeployFiles.path("Benchmarks/register-check.py")
        let extra = ProcessInfo.processInfo.environment["CACHET_REGISTER_NODE_FLAGS"] ?? ""
        // Past 120 s it gets SIGTERM, which makes it stop its nodes and report, and SIGKILL 20 s later.
        let outcome = try DeployFiles.run(
            python,
            [script, "--node", BuiltProducts.path(of: "cachet-node")] + Self.arguments
                + ["--node-flags", "--probe-interval 0.2 --forward-timeout 0.5 \(extra)"],
            timeout: 120,
            grace: 20
        )
        let verdict = outcome.output.split(separator: "\n").last { $0.hasPrefix("REGISTER CHECK") } ?? "no verdict"
        #expect(outcome.status == 0, "\(verdict)\n\(outcome.output.suffix(16000))\n\(outcome.error.suffix(2000))")
        #expect(verdict.hasPrefix("REGISTER CHECK PASSED"), "\(verdict)")
    }

    /// The same with the network cut: every node in a network namespace of its own, a node isolated from its
    /// peers, an owner and its stand-in split from the others, a node cut off from everyone (root only,
    /// as `NodePartitionTests`). Seen failing on the build before the partition fixes (stale reads in every
    /// kind). A partition run refuses more writes by design (a member in the minority takes none): 80%.
    @Test(
        .enabled(
            if: Self.namespacesCanBeMade,
            "network namespaces cannot be made here (root, iproute2, CAP_SYS_ADMIN)"
        ),
        .timeLimit(.minutes(3))
    )
    func noStaleReadThroughPartitions() throws {
        let python = try #require(Self.onPath("python3"), "python3 is needed to run Benchmarks/register-check.py")
        let outcome = try DeployFiles.run(
            python,
            [
                DeployFiles.path("Benchmarks/register-check.py"), "--node", BuiltProducts.path(of: "cachet-node"),
                "--network", "lab", "--actions", "isolate,split,cutoff", "--duration", "25", "--interval", "2",
                "--pause-min", "0.8", "--pause-max", "1.6", "--seed", "3", "--min-ack-ratio", "0.8",
                "--remove-when-passed",
            ],
            timeout: 120,
            grace: 20
        )
        let verdict = outcome.output.split(separator: "\n").last { $0.hasPrefix("REGISTER CHECK") } ?? "no verdict"
        #expect(outcome.status == 0, "\(verdict)\n\(outcome.output.suffix(16000))\n\(outcome.error.suffix(2000))")
        #expect(verdict.hasPrefix("REGISTER CHECK PASSED"), "\(verdict)")
    }

    /// Whether network namespaces can be made here: root and iproute2 are not enough in a container without
    /// `CAP_SYS_ADMIN`, so a lab of one host is built (and removed) to find out.
    static let namespacesCanBeMade: Bool = {
        guard NetworkNamespaceLab.unavailableReason == nil else { return false }
        return (try? NetworkNamespaceLab(hosts: 1)) != nil
    }()

    /// The first executable `name` on `PATH`.
    static func onPath(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
    }
}
