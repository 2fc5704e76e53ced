import CachetCLIKit
import CachetIO
import CachetTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Runs the built `cachet-cli` with arguments and standard input; returns its output and exit status.
func runCLI(_ arguments: [String], input: String = "") throws -> (output: String, status: Int32) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-cli"))
    process.arguments = arguments
    let stdin = Pipe()
    let stdout = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stdout
    try process.run()
    stdin.fileHandleForWriting.write(Data(input.utf8))
    try stdin.fileHandleForWriting.close()
    let output = stdout.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (String(decoding: output, as: UTF8.self), process.terminationStatus)
}

@Suite("cachet-cli against a real node", .dedicatedThreads)
struct CachetCLIProcessTests {
    @Test func helpAnswersWithTheUsageAndTheCommandLanguage() throws {
        for flag in ["--help", "-h"] {
            let (output, status) = try runCLI([flag])
            #expect(status == 0, "\(flag): \(output)")
            #expect(output.contains("USAGE: cachet-cli") && output.contains("commands:"), "\(flag): \(output)")
            #expect(!output.contains("unknown command"))
        }
    }

    @Test func pipedCommandsPrintOneAnswerPerLine() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let (output, status) = try runCLI(["--port", "\(node.port)"], input: "put k1 hello\nget k1\n")
        #expect(output == "OK\nhello\n")
        #expect(status == 0)
    }

    @Test func oneShotExitCodes() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let port = "\(node.port)"
        #expect(try runCLI(["--port", port, "put", "my key", "my value"]) == ("OK\n", 0))
        #expect(try runCLI(["--port", port, "get", "my key"]) == ("my value\n", 0))
        #expect(try runCLI(["--port", port, "get", "absent"]) == ("(not found)\n", 1))
        #expect(try runCLI(["--port", port, "del", "absent"]) == ("(not found)\n", 1))
        #expect(try runCLI(["--port", port, "frobnicate"]).status == 2)
    }

    @Test func pipedModeContinuesAfterErrorsAndExitsTwo() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let (output, status) = try runCLI(
            ["--port", "\(node.port)"],
            input: "nonsense\nput \"a b\" \"c d\"\nget \"a b\"\ndel \"a b\"\nget \"a b\"\n"
        )
        #expect(output == "ERROR: unknown command 'nonsense'; type help for the list\nOK\nc d\nOK\n(not found)\n")
        #expect(status == 2)
    }

    @Test func connectionRefusedNamesTheAddress() throws {
        // A port that was just free: bind it, note it, close it.
        let (probe, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        CachetSocket.close(probe)
        let (output, status) = try runCLI(["--port", "\(port)", "ping"])
        #expect(status == 2)
        #expect(output.contains("cannot connect to 127.0.0.1:\(port)"))
        // One hint, not two.
        #expect(output.components(separatedBy: "(is ").count == 2, "\(output)")
    }

    @Test func aFileThatCannotBeReadIsNamedWithTheReason() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let directory = TemporaryDirectory(prefix: "cachet-cli-file")
        defer { directory.remove() }
        let missing = try runCLI(["--port", "\(node.port)", "put", "k", "@" + directory.appending("absent")])
        #expect(missing.status == 2)
        #expect(
            missing.output.contains("cannot read \(directory.appending("absent")): No such file or directory"),
            "\(missing.output)"
        )
        let folder = try runCLI(["--port", "\(node.port)", "put", "k", "@" + directory.path])
        #expect(folder.status == 2 && folder.output.contains("it is a directory"), "\(folder.output)")
    }

    @Test func traceShowsAnnotatedFrames() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let (output, status) = try runCLI(["--port", "\(node.port)", "--trace", "put", "k1", "hello"])
        #expect(status == 0)
        #expect(
            output == """
                >> 25 bytes  len=21 v=1 op=PUT(0x01) flags=0x0000 id=1 | ttl=0 key_len=2 key="k1" value="hello"
                   00000015 01 01 0000 00000001 00000000 0002 6b31 68656c6c6f
                << 12 bytes  len=8 v=1 op=PUT(0x01) status=OK(0) id=1
                   00000008 01 01 0000 00000001
                OK

                """
        )
    }

    @Test func binaryValuesRoundTripThroughFiles() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let directory = TemporaryDirectory(prefix: "cachet-cli")
        let input = directory.appending("in.bin")
        let output = directory.appending("out.bin")
        let bytes = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        _ = FileManager.default.createFile(atPath: input, contents: Data(bytes))
        #expect(try runCLI(["--port", "\(node.port)", "put", "blob", "@" + input]) == ("OK\n", 0))
        #expect(
            try runCLI(["--port", "\(node.port)", "get", "blob", "--out", output]) == (
                "OK (70000 bytes written to \(output))\n", 0
            )
        )
        #expect(FileManager.default.contents(atPath: output) == Data(bytes))
        // A range of it: to a file, printed, and past the end.
        #expect(
            try runCLI(["--port", "\(node.port)", "get", "blob", "--range", "65536-", "--out", output]) == (
                "OK (4464 of 70000 bytes written to \(output))\n", 0
            )
        )
        #expect(FileManager.default.contents(atPath: output) == Data(bytes[65536...]))
        #expect(
            try runCLI(["--port", "\(node.port)"], input: "put t hello\nget t --range 1-3\nget t --range 6-\n").output
                == "OK\nell  (3 of 5 bytes)\nERROR RANGE_NOT_SATISFIABLE: the range starts past the value's end (5 bytes)\n"
        )
        // Without --out a binary value prints as hex.
        #expect(
            try runCLI(["--port", "\(node.port)"], input: "put b \"\\x00\\x01\"\nget b\n").output == "OK\n0x0001\n"
        )
    }

    @Test func aFileLargerThanAFrameIsSentInPartsAndWrittenBackByRanges() throws {
        let directory = TemporaryDirectory(prefix: "cachet-cli-large")
        defer { directory.remove() }
        // One frame holds 2 MiB here: the file is more than three frames, and more than the memory tier.
        let node = try NodeProcess(arguments: [
            "--data-dir", directory.appending("data"), "--disk-limit", "64MiB", "--max-frame", "2MiB",
            "--memory-limit", "4MiB",
        ])
        let input = directory.appending("in.bin")
        let output = directory.appending("out.bin")
        let bytes = PatternBytes.make(count: 7_000_003, step: 61, seed: 5)
        _ = FileManager.default.createFile(atPath: input, contents: Data(bytes))
        let port = "\(node.port)"
        #expect(try runCLI(["--port", port, "put", "video", "@" + input]) == ("OK (7000003 bytes in 7 parts)\n", 0))
        #expect(
            try runCLI(["--port", port, "get", "video", "--out", output]) == (
                "OK (7000003 bytes written to \(output))\n", 0
            )
        )
        #expect(FileManager.default.contents(atPath: output) == Data(bytes))
        #expect(
            try runCLI(["--port", port, "get", "video", "--range", "1048570-3500000", "--out", output]) == (
                "OK (2451431 of 7000003 bytes written to \(output))\n", 0
            )
        )
        #expect(FileManager.default.contents(atPath: output) == Data(bytes[1_048_570...3_500_000]))
        #expect(
            try runCLI(["--port", port, "get", "video", "--range", "5-14", "--out", output]) == (
                "OK (10 of 7000003 bytes written to \(output))\n", 0
            )
        )
        #expect(FileManager.default.contents(atPath: output) == Data(bytes[5...14]))
        // Printed without --out, a value longer than a frame is refused with the way to read it.
        let printed = try runCLI(["--port", port, "get", "video"])
        #expect(printed.status == 2 && printed.output.contains("TOO_LARGE") && printed.output.contains("range"))
        // Piped, so no progress bar: the output is the answer lines only.
        #expect(!printed.output.contains("%"))
        #expect(try runCLI(["--port", port, "get", "absent", "--out", output]) == ("(not found)\n", 1))
        // A node whose frames hold less than a part: the parts are cut to fit them.
        let smallFrames = try NodeProcess(arguments: [
            "--data-dir", directory.appending("small"), "--disk-limit", "64MiB", "--max-frame", "1MiB",
        ])
        let small = "\(smallFrames.port)"
        #expect(try runCLI(["--port", small, "put", "video", "@" + input]) == ("OK (7000003 bytes in 7 parts)\n", 0))
        #expect(try runCLI(["--port", small, "get", "video", "--out", output]).status == 0)
        #expect(FileManager.default.contents(atPath: output) == Data(bytes))
        // A node without a disk tier takes no parts: a file that fits one frame goes in one PUT instead.
        let memoryOnly = try NodeProcess(arguments: ["--disk-limit", "0"])
        #expect(try runCLI(["--port", "\(memoryOnly.port)", "put", "video", "@" + input]) == ("OK\n", 0))
        #expect(try runCLI(["--port", "\(memoryOnly.port)", "get", "video", "--out", output]).status == 0)
        #expect(FileManager.default.contents(atPath: output) == Data(bytes))
    }

    @Test func sessionReconnectsAfterTheNodeRestarts() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let session = CachetCLISession(host: "127.0.0.1", port: node.port, timeout: 2)
        #expect(session.run(line: "ping").outcome == .ok)
        node.stop()
        let broken = session.run(line: "ping")
        #expect(broken.outcome == .error)
        #expect(broken.lines.first?.hasPrefix("ERROR:") == true)
    }
}
