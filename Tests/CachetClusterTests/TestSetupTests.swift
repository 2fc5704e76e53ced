import CachetTestSupport
import Foundation
import Testing

/// The README's test command sets up what the tests need, as CI does: one list of Debian packages
/// (`Tests/debian-packages.txt`) that `./test.sh` installs, `.ci/run` installing nothing of its own, and
/// every program and Python module the suite runs coming from a package on that list (or from one every
/// Debian system has).
@Suite("The test command's set-up", .dedicatedThreads)
struct TestSetupTests {
    /// The packages of `Tests/debian-packages.txt`.
    static func listedPackages() throws -> [String] {
        try DeployFiles.text("Tests/debian-packages.txt").split(separator: "\n").compactMap { line in
            let word = line.split(separator: " ").first.map(String.init) ?? ""
            return word.isEmpty || word.hasPrefix("#") ? nil : word
        }
    }

    @Test func ciRunsTheTestCommandAndInstallsNothingOfItsOwn() throws {
        let ci = try DeployFiles.text(".ci/run")
        let commands = ci.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("#") }
        #expect(commands.contains { $0.contains("./test.sh") }, ".ci/run does not run ./test.sh")
        #expect(
            !commands.contains { $0.contains("apt-get") || $0.contains("dpkg ") || $0.contains("pip install") },
            ".ci/run installs something itself: ./test.sh must, so that a newcomer gets the same set-up"
        )
        let readme = try DeployFiles.text("README.md")
        #expect(readme.contains("```sh\n./test.sh\n```"), "README.md does not give ./test.sh as the test command")
    }

    /// On a machine where none of the packages is installed (a `dpkg` that knows none of them), the test
    /// command installs every package of the list, through `apt-get`, before it runs anything.
    @Test(.enabled(if: getuid() == 0, "the set-up installs as root or through sudo; this checks the root path"))
    func onAMachineWithoutThemTheTestCommandInstallsEveryListedPackage() throws {
        let directory = TemporaryDirectory(prefix: "cachet-setup")
        defer { directory.remove() }
        let log = directory.appending("apt-get.log")
        // Stand-ins for a fresh machine's dpkg (nothing installed) and apt-get (records what it is asked).
        try "#!/bin/sh\nexit 1\n".write(toFile: directory.appending("dpkg"), atomically: true, encoding: .utf8)
        try "#!/bin/sh\necho \"$*\" >> '\(log)'\n".write(
            toFile: directory.appending("apt-get"),
            atomically: true,
            encoding: .utf8
        )
        for tool in ["dpkg", "apt-get"] {
            chmod(directory.appending(tool), 0o755)
        }
        let path = directory.path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let outcome = try DeployFiles.run(DeployFiles.path("test.sh"), ["--setup"], environment: ["PATH": path])
        #expect(outcome.status == 0, "\(outcome.output)\(outcome.error)")
        let calls = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        let install = calls.split(separator: "\n").first { $0.hasPrefix("install") }.map(String.init) ?? ""
        let asked = Set(install.split(separator: " ").map(String.init))
        for package in try Self.listedPackages() {
            #expect(
                asked.contains(package),
                "./test.sh --setup did not install \(package): apt-get was called \(calls)"
            )
        }
        #expect(calls.hasPrefix("update"), "apt-get update comes first: \(calls)")
    }

    /// Every absolute program path the tests run (`"/usr/bin/openssl"`, ...) belongs to a listed package,
    /// or to an essential one, or to one the benchmarks' comparisons use only when present; every Python
    /// module the tests import beyond the standard library is listed.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/dpkg"), "dpkg is not installed"))
    func everyProgramAndModuleTheTestsRunComesFromAListedPackage() throws {
        let listed = Set(try Self.listedPackages())
        // Peers of the benchmarks' end-to-end tests, which skip without them (installing them starts their
        // services): see docs/performance.md.
        let optional: Set = ["memcached", "redis"]
        var sources: [String] = []
        for folder in ["Tests", "Sources/CachetTestSupport"] {
            let enumerator = FileManager.default.enumerator(atPath: DeployFiles.path(folder))
            while let file = enumerator?.nextObject() as? String {
                // The Swift tests, and the scripts they run (the browser test's).
                if file.hasSuffix(".swift") || file.hasSuffix(".py") {
                    sources.append(try DeployFiles.text(folder + "/" + file))
                }
            }
        }
        let text = sources.joined(separator: "\n")
        let programs = Set(
            text.matches(of: /"(\/(?:usr\/)?s?bin\/[a-z0-9.+-]+)"/).map { String($0.output.1) }
        )
        #expect(programs.contains("/usr/bin/openssl") && programs.contains("/usr/bin/python3"))
        // What the listed packages bring with them (python3 brings python3-minimal, which has the binary).
        let depends = try DeployFiles.run(
            "/usr/bin/dpkg-query",
            ["-W", "-f=${Pre-Depends},${Depends}\n"] + listed.sorted()
        )
        let brought = Set(depends.output.matches(of: /(?:^|[,|\n]\s*)([a-z0-9.+-]+)/).map { String($0.output.1) })
        for program in programs.sorted() where !optional.contains(where: { program.contains($0) }) {
            let owner = try DeployFiles.run("/usr/bin/dpkg", ["-S", program])
            let line = owner.output.split(separator: "\n").first { !$0.hasPrefix("diversion by") }
            guard owner.status == 0, let package = line?.split(separator: ":").first.map(String.init) else {
                // Not installed here: it may only be named (a fallback path); nothing to check.
                continue
            }
            let essential = try DeployFiles.run("/usr/bin/dpkg-query", ["-W", "-f=${Essential}", package])
            #expect(
                listed.contains(package) || brought.contains(package) || essential.output == "yes",
                "the tests run \(program), from \(package), which Tests/debian-packages.txt does not list"
            )
        }
        // Python modules outside the standard library, by the package that provides them.
        let modules = [
            ("prometheus_client", "python3-prometheus-client"), ("yaml", "python3-yaml"),
            ("selenium", "python3-selenium"),
        ]
        for (module, package) in modules {
            if text.contains("import \(module)") || text.contains("from \(module)") || text.contains("\"\(module)\"") {
                #expect(listed.contains(package), "the tests import \(module): list \(package)")
            }
        }
        // The system-library targets' packages and their finder.
        let manifest = try DeployFiles.text("Package.swift")
        for match in manifest.matches(of: /\.apt\(\["([a-z0-9.+-]+)"\]\)/) {
            #expect(listed.contains(String(match.output.1)), "Package.swift needs \(match.output.1)")
        }
        if manifest.contains("pkgConfig:") { #expect(listed.contains("pkg-config")) }
    }
}
