import CachetTestSupport
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Paths in the repository, from this file's place in it, and running its programs.
enum DeployFiles {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The absolute path of a file given relative to the repository's root.
    static func path(_ relative: String) -> String { root + "/" + relative }

    /// A repository file's text.
    static func text(_ relative: String) throws -> String {
        try String(contentsOfFile: path(relative), encoding: .utf8)
    }

    /// What a finished program said.
    struct Outcome {
        var status: Int32
        var output: String
        var error: String
    }

    /// Runs a program to its end, its output in temporary files (so that no pipe fills), and kills it
    /// when it outlives `timeout` seconds: with `grace`, SIGTERM first (a program that cleans up then
    /// gets that long) and SIGKILL after.
    static func run(
        _ program: String,
        _ arguments: [String],
        environment: [String: String] = [:],
        timeout: Double = 60,
        grace: Double = 0
    ) throws -> Outcome {
        let directory = TemporaryDirectory(prefix: "cachet-run")
        let outputPath = directory.appending("out")
        let errorPath = directory.appending("err")
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = FileHandle(forWritingAtPath: outputPath)
        process.standardError = FileHandle(forWritingAtPath: errorPath)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning && grace > 0 {
            kill(process.processIdentifier, SIGTERM)
            let end = Date().addingTimeInterval(grace)
            while process.isRunning && Date() < end { usleep(10_000) }
        }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
        return Outcome(
            status: process.terminationStatus,
            output: (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "",
            error: (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
        )
    }

    /// The `--flags` that `cachet-node --help` lists.
    static let nodeFlags: Set<String> = {
        guard let outcome = try? run(BuiltProducts.path(of: "cachet-node"), ["--help"], timeout: 30) else { return [] }
        return flags(in: outcome.output)
    }()

    /// Every `--word` in `text`.
    static func flags(in text: String) -> Set<String> {
        var found = Set<String>()
        var rest = Substring(text)
        while let range = rest.range(of: "--") {
            let after = rest[range.upperBound...]
            let word = after.prefix { $0.isLetter || $0.isNumber || $0 == "-" }
            if let first = word.first, first.isLetter { found.insert("--" + word) }
            rest = after
        }
        return found
    }

    /// Whether `python3` can import PyYAML here.
    static let pyYAMLAvailable: Bool = {
        guard let python = pythonPath else { return false }
        return (try? run(python, ["-c", "import yaml"], timeout: 30))?.status == 0
    }()

    static let pythonPath: String? = ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// Every document of the YAML files, as JSON objects, read by PyYAML's safe loader.
    static func yamlDocuments(_ relatives: [String]) throws -> [[String: Any]] {
        let script =
            "import json, sys, yaml\n"
            + "print(json.dumps([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f, encoding='utf-8'))]))"
        let outcome = try run(pythonPath!, ["-c", script] + relatives.map(path), timeout: 30)
        guard outcome.status == 0 else { throw DeployFileError(description: "PyYAML refused: \(outcome.error)") }
        let json = try JSONSerialization.jsonObject(with: Data(outcome.output.utf8))
        return (json as? [Any] ?? []).compactMap { $0 as? [String: Any] }
    }
}

struct DeployFileError: Error, CustomStringConvertible {
    var description: String
}
