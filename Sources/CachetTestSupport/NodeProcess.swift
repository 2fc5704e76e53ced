public import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where the package's built executables are: beside the running test binary, or `CACHET_BIN_DIR`.
public enum BuiltProducts {
    /// The directory holding `cachet-node`, `cachet-cli` and `cachet-bench`.
    public static var directory: String {
        if let override = ProcessInfo.processInfo.environment["CACHET_BIN_DIR"] { return override }
        let executable =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
        // Inside an .xctest bundle directory the binaries sit one or more levels up.
        while url.path != "/" && !FileManager.default.fileExists(atPath: url.appendingPathComponent("cachet-node").path)
        {
            url = url.deletingLastPathComponent()
        }
        return url.path
    }

    /// The path of a built executable.
    /// - Parameter name: `cachet-node`, `cachet-cli` or `cachet-bench`.
    /// - Returns: its absolute path.
    public static func path(of name: String) -> String { directory + "/" + name }
}

/// Errors starting or stopping a node process.
public struct NodeProcessError: Error, CustomStringConvertible {
    /// What failed.
    public var description: String
}

/// A real `cachet-node` process on 127.0.0.1 with an ephemeral port, killed when released.
public final class NodeProcess {
    /// The child process.
    public let process: Process
    /// The port it listens on.
    public let port: Int
    /// The file its standard error (logs) goes to.
    public let logPath: String
    private let logDirectory: TemporaryDirectory

    /// Starts `cachet-node --port 0` with extra arguments and waits for its listening line.
    ///
    /// Unless the arguments name a `--data-dir`, the node keeps its disk tier in a temporary directory
    /// removed with the process object.
    /// - Parameters:
    ///   - arguments: extra command-line arguments.
    ///   - timeout: seconds to wait for the listening line.
    /// - Throws: ``NodeProcessError`` when it exits or stays silent.
    ///   - launcher: a command that runs the node, such as `["/usr/bin/prlimit", "--nofile=64"]`; empty
    ///     runs it directly.
    public init(arguments: [String] = [], timeout: Double = 20, launcher: [String] = []) throws {
        logDirectory = TemporaryDirectory(prefix: "cachet-node-log")
        logPath = logDirectory.appending("node.log")
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process = Process()
        var arguments = arguments
        if !arguments.contains("--data-dir") {
            arguments += ["--data-dir", logDirectory.appending("data")]
        }
        let node = BuiltProducts.path(of: "cachet-node")
        let nodeArguments = ["--host", "127.0.0.1", "--port", "0"] + arguments
        if let program = launcher.first {
            process.executableURL = URL(fileURLWithPath: program)
            process.arguments = Array(launcher.dropFirst()) + [node] + nodeArguments
        } else {
            process.executableURL = URL(fileURLWithPath: node)
            process.arguments = nodeArguments
        }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: logPath)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let line = NodeProcess.readLine(from: output.fileHandleForReading.fileDescriptor, timeout: timeout)
        guard let line, let range = line.range(of: "cachet-node listening on "),
            let port = Int(line[range.upperBound...].split(separator: ":").last ?? "")
        else {
            process.terminate()
            process.waitUntilExit()
            let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            throw NodeProcessError(
                description: "cachet-node did not report a port (got \(line ?? "nothing")); log:\n\(log)"
            )
        }
        self.port = port
    }

    /// Reads one line from a pipe, giving up after `timeout` seconds.
    private static func readLine(from fd: Int32, timeout: Double) -> String? {
        var bytes: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 100)
            if ready <= 0 { continue }
            var byte: UInt8 = 0
            let n = read(fd, &byte, 1)
            if n <= 0 { return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) }
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
        return nil
    }

    /// Sends a signal and waits for the process to exit.
    /// - Parameters:
    ///   - signal: the signal, SIGTERM by default.
    ///   - timeout: seconds to wait before killing it.
    /// - Returns: the exit status, or nil when it had to be killed.
    @discardableResult
    public func stop(signal: Int32 = SIGTERM, timeout: Double = 15) -> Int32? {
        guard process.isRunning else { return process.terminationStatus }
        kill(process.processIdentifier, signal)
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return nil
        }
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// The node's log so far.
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Opens a new blocking client connection to the node.
    /// - Returns: the connected socket.
    /// - Throws: ``TestSocketError``.
    public func connect() throws -> TestSocket { try TestSocket(port: port) }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}
