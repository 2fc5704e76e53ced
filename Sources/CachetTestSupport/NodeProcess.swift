import CachetIO
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
///
/// Waiting conventions (see also ``DedicatedThreadsTrait``): a test running on the task pool (an `async`
/// test without the `.dedicatedThreads` trait) starts nodes with ``start(arguments:timeout:launcher:)`` and
/// stops them with ``terminate(signal:timeout:)``, which wait with `Task.sleep` and hold no thread; the
/// synchronous ``init(arguments:timeout:launcher:)`` and ``stop(signal:timeout:)`` block the calling
/// thread for as long as the node takes (up to their timeouts), so they belong in tests that run on
/// dedicated threads. Releasing the object (SIGKILL, then reaping) blocks for milliseconds only.
///
/// `Sendable`: every stored property is immutable, and the process is only signalled and reaped.
public final class NodeProcess: Sendable {
    /// The child process.
    public let process: Process
    /// The port it listens on.
    public let port: Int
    /// The file its standard error (logs) goes to.
    public let logPath: String
    private let logDirectory: TemporaryDirectory

    /// Starts `cachet-node --port 0` with extra arguments and waits for its listening line, blocking the
    /// calling thread (use ``start(arguments:timeout:launcher:)`` from a test on the task pool).
    ///
    /// Unless the arguments name a `--data-dir`, the node keeps its disk tier in a temporary directory
    /// removed with the process object.
    /// - Parameters:
    ///   - arguments: extra command-line arguments.
    ///   - timeout: seconds to wait for the listening line.
    ///   - launcher: a command that runs the node, such as `["/usr/bin/prlimit", "--nofile=64"]`; empty
    ///     runs it directly.
    /// - Throws: ``NodeProcessError`` when it exits or stays silent.
    public convenience init(arguments: [String] = [], timeout: Double = 20, launcher: [String] = []) throws {
        let launch = try Launch(arguments: arguments, launcher: launcher)
        let line = NodeProcess.readLine(from: launch.output, timeout: timeout)
        try self.init(launch, line: line)
    }

    /// Starts `cachet-node --port 0` with extra arguments and waits for its listening line without
    /// holding a thread (it polls the node's output between `Task.sleep`s).
    ///
    /// Unless the arguments name a `--data-dir`, the node keeps its disk tier in a temporary directory
    /// removed with the process object.
    /// - Parameters:
    ///   - arguments: extra command-line arguments.
    ///   - timeout: seconds to wait for the listening line.
    ///   - launcher: a command that runs the node, such as `["/usr/bin/prlimit", "--nofile=64"]`; empty
    ///     runs it directly.
    /// - Returns: the running node.
    /// - Throws: ``NodeProcessError`` when it exits or stays silent, `CancellationError` when the task is
    ///   cancelled while waiting (the node is killed).
    public static func start(
        arguments: [String] = [],
        timeout: Double = 20,
        launcher: [String] = []
    ) async throws -> NodeProcess {
        let launch = try Launch(arguments: arguments, launcher: launcher)
        let line = try await NodeProcess.readLine(from: launch.output, timeout: timeout)
        return try NodeProcess(launch, line: line)
    }

    /// A launched process whose port is not known yet.
    private struct Launch {
        let process: Process
        let logPath: String
        let logDirectory: TemporaryDirectory
        /// The read end of the node's standard output, where it prints its listening line.
        let output: FileHandle

        init(arguments: [String], launcher: [String]) throws {
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
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle(forWritingAtPath: logPath)
            process.standardInput = FileHandle.nullDevice
            output = pipe.fileHandleForReading
            try process.run()
        }
    }

    /// Takes over a launched process once its listening line is read (or fails, killing it).
    private init(_ launch: Launch, line: String?) throws {
        guard let line, let range = line.range(of: "cachet-node listening on "),
            let port = Int(line[range.upperBound...].split(separator: ":").last ?? "")
        else {
            // SIGKILL, not SIGTERM: reaping is then a matter of milliseconds, on any thread.
            kill(launch.process.processIdentifier, SIGKILL)
            launch.process.waitUntilExit()
            let log = (try? String(contentsOfFile: launch.logPath, encoding: .utf8)) ?? ""
            throw NodeProcessError(
                description: "cachet-node did not report a port (got \(line ?? "nothing")); log:\n\(log)"
            )
        }
        process = launch.process
        logPath = launch.logPath
        logDirectory = launch.logDirectory
        self.port = port
    }

    /// Reads one line from a pipe, blocking for at most `timeout` seconds.
    private static func readLine(from output: FileHandle, timeout: Double) -> String? {
        var reader = LineReader(fd: output.fileDescriptor)
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let result = reader.step(waitingMilliseconds: 100) { return result }
        }
        return nil
    }

    /// Reads one line from a pipe within `timeout` seconds, sleeping (not blocking) while it is empty.
    private static func readLine(from output: FileHandle, timeout: Double) async throws -> String? {
        var reader = LineReader(fd: output.fileDescriptor)
        let deadline = ContinuousClock.now + .seconds(timeout)
        while ContinuousClock.now < deadline {
            if let result = reader.step(waitingMilliseconds: 0) { return result }
            try await Task.sleep(for: .milliseconds(5))
        }
        // Once more after the deadline: a task resumed late on a loaded machine still reads what is there.
        return reader.step(waitingMilliseconds: 0) ?? nil
    }

    /// Reads a line byte by byte; ``step(waitingMilliseconds:)`` returns nil while the line is incomplete.
    private struct LineReader {
        let fd: Int32
        var bytes: [UInt8] = []

        init(fd: Int32) { self.fd = fd }

        /// Waits at most `milliseconds` for input and reads what is there. Returns `.some(line)` when the
        /// line is complete, `.some(nil)` when the pipe ended first, nil to go on.
        mutating func step(waitingMilliseconds milliseconds: Int32) -> String?? {
            let deadline = CachetDeadline(after: .milliseconds(milliseconds))
            while CachetSocket.wait(fd, for: Int16(POLLIN), until: deadline) {
                var byte: UInt8 = 0
                let n = read(fd, &byte, 1)
                if n <= 0 { return .some(bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)) }
                if byte == UInt8(ascii: "\n") { return .some(String(decoding: bytes, as: UTF8.self)) }
                bytes.append(byte)
            }
            return nil
        }
    }

    /// Sends a signal and waits for the process to exit, blocking the calling thread (use
    /// ``terminate(signal:timeout:)`` from a test on the task pool).
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
        return reap()
    }

    /// Sends a signal and waits for the process to exit without holding a thread (it checks between
    /// `Task.sleep`s).
    /// - Parameters:
    ///   - signal: the signal, SIGTERM by default.
    ///   - timeout: seconds to wait before killing it.
    /// - Returns: the exit status, or nil when it had to be killed (also when the task was cancelled
    ///   while waiting).
    @discardableResult
    public func terminate(signal: Int32 = SIGTERM, timeout: Double = 15) async -> Int32? {
        guard process.isRunning else { return process.terminationStatus }
        kill(process.processIdentifier, signal)
        let deadline = ContinuousClock.now + .seconds(timeout)
        while process.isRunning && ContinuousClock.now < deadline {
            do { try await Task.sleep(for: .milliseconds(10)) } catch { break }
        }
        return reap()
    }

    /// Kills the process if it still runs, then reaps it: milliseconds either way.
    private func reap() -> Int32? {
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

extension NodeProcess {
    /// The node's STATS, decoded, over a new connection.
    /// - Returns: the STATS object.
    /// - Throws: ``TestSocketError`` when the node cannot be reached, answers with another status than OK, or
    ///   with a body that is not a JSON object.
    public func stats() throws -> [String: Any] {
        let reply = try connect().roundTrip(.stats)
        guard reply.status == .ok,
            let object = try? JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any]
        else {
            throw TestSocketError(
                description: "STATS answered \(reply.status): \(String(decoding: reply.body, as: UTF8.self))"
            )
        }
        return object
    }
}
