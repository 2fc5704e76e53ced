import CachetTestSupport
import Foundation
import Testing

/// The documents' snippets cannot rot: every Swift snippet of README.md, docs/ and the DocC articles is
/// compiled (it is found, line for line and in order, in a file that a package of this repository builds:
/// `Examples/Sources/CachetSnippets/`, or the example apps on the drivers for the framework snippets), the
/// `Package.swift` fragment names products that exist, and README's shell session with cachet-cli is run
/// against a real node and answers what README shows.
@Suite("Documentation snippets", .dedicatedThreads)
struct SnippetTests {
    /// A fenced block of a document.
    struct Block: CustomStringConvertible {
        var document: String
        var line: Int
        var language: String
        var lines: [String]
        var description: String { "\(document):\(line)" }
    }

    /// The fenced blocks of a document (`relative` to the repository's root).
    static func blocks(of relative: String) throws -> [Block] {
        var blocks: [Block] = []
        var current: Block?
        for (index, line) in try DeployFiles.text(relative).split(separator: "\n", omittingEmptySubsequences: false)
            .enumerated()
        {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if var block = current {
                if trimmed == "```" {
                    blocks.append(block)
                    current = nil
                } else {
                    block.lines.append(String(line))
                    current = block
                }
            } else if trimmed.hasPrefix("```") {
                current = Block(document: relative, line: index + 1, language: String(trimmed.dropFirst(3)), lines: [])
            }
        }
        return blocks
    }

    /// The documents whose snippets are checked.
    static func documents() throws -> [String] {
        let docs = try FileManager.default.contentsOfDirectory(atPath: DeployFiles.path("docs"))
            .filter { $0.hasSuffix(".md") }.sorted().map { "docs/" + $0 }
        let docc = "Sources/CachetClient/CachetClient.docc"
        let articles = try FileManager.default.contentsOfDirectory(atPath: DeployFiles.path(docc))
            .filter { $0.hasSuffix(".md") }.sorted().map { "\(docc)/\($0)" }
        return ["README.md"] + docs + articles
    }

    /// The files that hold the snippets for compiling: a line's words without the indentation.
    static func compiledSnippetFiles() throws -> [(name: String, lines: [String])] {
        var paths = try FileManager.default.contentsOfDirectory(
            atPath: DeployFiles.path("Examples/Sources/CachetSnippets")
        )
        .filter { $0.hasSuffix(".swift") }.map { "Examples/Sources/CachetSnippets/" + $0 }
        // The framework snippets, in the example apps on the drivers (`Examples/VaporApp`...).
        for app in try FileManager.default.contentsOfDirectory(atPath: DeployFiles.path("Examples")) {
            let sources = "Examples/\(app)/Sources"
            for target in (try? FileManager.default.contentsOfDirectory(atPath: DeployFiles.path(sources))) ?? [] {
                let file = "\(sources)/\(target)/Snippets.swift"
                if FileManager.default.fileExists(atPath: DeployFiles.path(file)) { paths.append(file) }
            }
        }
        return try paths.sorted().map { path in
            (path, try DeployFiles.text(path).split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) })
        }
    }

    /// Whether `snippet`'s non-empty lines appear in `file`'s lines in the same order (other lines, such as
    /// a wrapping function's, may come between).
    static func contains(_ file: [String], _ snippet: [String]) -> Bool {
        var position = file.startIndex
        for line in snippet.map({ $0.trimmingCharacters(in: .whitespaces) }) where !line.isEmpty {
            guard let found = file[position...].firstIndex(of: line) else { return false }
            position = found + 1
        }
        return true
    }

    /// A `Package.swift` fragment: it starts with that comment.
    static func isManifestFragment(_ block: Block) -> Bool {
        block.lines.first?.trimmingCharacters(in: .whitespaces) == "// Package.swift"
    }

    @Test func everySwiftSnippetIsCompiledByAPackageOfTheRepository() throws {
        let files = try Self.compiledSnippetFiles()
        #expect(files.count >= 5, "\(files.map(\.name))")
        var checked = 0
        for document in try Self.documents() {
            for block in try Self.blocks(of: document)
            where block.language == "swift" && !Self.isManifestFragment(block) {
                checked += 1
                #expect(
                    files.contains { Self.contains($0.lines, block.lines) },
                    "the snippet at \(block) is not in any of \(files.map(\.name)): copy it there, word for word"
                )
            }
        }
        #expect(checked >= 10, "only \(checked) Swift snippets found")
    }

    /// The manifest fragments' products are the ones the packages define; the core's are named as
    /// `Examples/`, a consumer built by path, names them.
    @Test func theManifestFragmentNamesProductsThatExist() throws {
        let manifests = try [
            "Package.swift", "Integrations/CachetVapor/Package.swift",
            "Integrations/CachetHummingbird/Package.swift",
        ].map { try DeployFiles.text($0) }.joined()
        let examples = try DeployFiles.text("Examples/Package.swift")
        var fragments = 0
        for document in try Self.documents() {
            for block in try Self.blocks(of: document) where Self.isManifestFragment(block) {
                fragments += 1
                for line in block.lines.map({ $0.trimmingCharacters(in: .whitespaces) })
                where line.hasPrefix(".product(name: \"") {
                    let product = line.split(separator: "\"")[1]
                    #expect(manifests.contains(".library(name: \"\(product)\""), "\(block): no product \(product)")
                    guard line.contains("package: \"cachet\")") else { continue }
                    #expect(
                        examples.contains(line.trimmingCharacters(in: [","])),
                        "\(block): \(line) is not what Examples/ uses"
                    )
                }
            }
        }
        #expect(fragments >= 1)
    }

    /// README's session with cachet-cli, run against a real node (on its own port, not 7420): the same
    /// answers, line for line.
    @Test func readmesCLISessionAnswersWhatItShows() throws {
        let blocks = try Self.blocks(of: "README.md")
        let block = try #require(
            blocks.first { $0.lines.first?.hasPrefix("$ printf") == true },
            "README.md has no `$ printf ... | cachet-cli` session"
        )
        let command = String(block.lines[0].dropFirst(2))
        let expected = Array(block.lines.dropFirst())
        let pipe = try #require(command.range(of: "| swift run -c release cachet-cli --port 7420"), "\(command)")
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let outcome = try DeployFiles.run(
            "/bin/sh",
            [
                "-c",
                String(command[..<pipe.lowerBound]) + "| \(BuiltProducts.path(of: "cachet-cli")) --port \(node.port)",
            ],
            timeout: 30
        )
        #expect(outcome.status == 0, "\(outcome.error)")
        #expect(outcome.output.split(separator: "\n").map(String.init) == expected, "\(outcome.output)")
        node.stop()
    }

    /// The `--help` text of each program, asked once.
    static let helpTexts: [String: String] = {
        var texts: [String: String] = [:]
        for program in ["cachet-node", "cachet-cli", "cachet-bench"] {
            let outcome = try? DeployFiles.run(BuiltProducts.path(of: program), ["--help"], timeout: 30)
            texts[program] = (outcome?.output ?? "") + (outcome?.error ?? "")
        }
        return texts
    }()

    /// Whether `help` names `flag` as a whole word (`--secret-fil` is not `--secret-file`).
    static func lists(_ help: String, _ flag: String) -> Bool {
        let wordCharacters = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-"))
        var rest = help[...]
        while let range = rest.range(of: flag) {
            let after = rest[range.upperBound...].unicodeScalars.first
            let before = rest[..<range.lowerBound].unicodeScalars.last
            if after.map({ !wordCharacters.contains($0) }) ?? true, before.map({ !wordCharacters.contains($0) }) ?? true
            {
                return true
            }
            rest = rest[range.upperBound...]
        }
        return false
    }

    /// The `--flags` given to cachet-node, cachet-cli or cachet-bench on a command line of a shell block
    /// (run directly, from `.build/...`, or through `swift run`), up to the end of that command.
    static func flagsByProgram(in line: String) -> [(program: String, flag: String)] {
        var found: [(String, String)] = []
        var program: String?
        for word in line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init) {
            if ["|", "||", "&&", ";", "&"].contains(word) || word.hasPrefix("#") {
                program = nil
                if word.hasPrefix("#") { break }
                continue
            }
            let name = word.split(separator: "/").last.map(String.init) ?? word
            if ["cachet-node", "cachet-cli", "cachet-bench"].contains(name) {
                program = name
                continue
            }
            let flag =
                word.trimmingCharacters(in: CharacterSet(charactersIn: "[]`,")).split(separator: "=").first
                .map(String.init) ?? ""
            if let program, flag.hasPrefix("--"), flag.count > 2 { found.append((program, flag)) }
        }
        return found
    }

    /// Every flag a shell snippet of README.md, docs/ or deploy/README.md gives cachet-node, cachet-cli or
    /// cachet-bench is one the program's `--help` lists: a renamed or removed flag fails here, not in a
    /// reader's terminal.
    @Test func everyFlagOfTheShellSnippetsIsOneTheProgramKnows() throws {
        var checked = 0
        for document in try Self.documents() + ["deploy/README.md"] {
            for block in try Self.blocks(of: document) where ["", "sh", "bash", "console"].contains(block.language) {
                for line in block.lines {
                    for (program, flag) in Self.flagsByProgram(in: line) {
                        checked += 1
                        #expect(
                            Self.lists(Self.helpTexts[program] ?? "", flag),
                            "\(block): \(program) \(flag) is not in `\(program) --help`"
                        )
                    }
                }
            }
        }
        #expect(checked >= 20, "only \(checked) flags found in the shell snippets")
    }
}
