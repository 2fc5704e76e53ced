import ArgumentParser
import CachetAuth
import CachetCLIKit
import CachetIO
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `cachet-cli`: a netcat-style client for one node. All logic lives in CachetCLIKit.
@main
struct CachetCLICommandLine: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cachet-cli",
        abstract: "Talks to a Cachet node: put, get, del, clear, stats, ping, watch.",
        discussion: """
            With a command, runs it once and exits 0 (OK), 1 (not found) or 2 (error). Without one, reads \
            commands from standard input, one per line (a prompt when it is a terminal), and exits 0, or 2 if \
            any command failed. Type 'help' for the command language.
            """
    )

    @Option(help: "The node's address: IPv4 (127.0.0.1), IPv6 (::1) or a host name.")
    var host = "127.0.0.1"

    @Option(help: "The node's port (1 to 65535).")
    var port = 7420

    @Option(help: "Seconds allowed for connecting and for each reply.")
    var timeout = 5.0

    @Option(help: "The largest reply accepted, in bytes; a reply announcing more is an error at once.")
    var maxFrame = 64 << 20

    @Flag(help: "Print every frame sent and received as annotated hex.")
    var trace = false

    @Flag(
        help: """
            Make stats and clear cluster-wide: the node asks every member and the answer lists each by id \
            with its figures or its error (exit 2 if any member failed).
            """
    )
    var cluster = false

    @Flag(help: "Speak TLS (to the node's --tls-port), checking its certificate against --tls-ca.")
    var tls = false

    @Option(help: "CA certificates (PEM) the node's certificate must chain to (with --tls; default: the system's).")
    var tlsCa: String?

    @Option(help: "A client certificate (PEM) to present, for a node that asks for one (with --tls-key).")
    var tlsCert: String?

    @Option(help: "The client certificate's private key (PEM).")
    var tlsKey: String?

    @Option(help: "The name the node's certificate must carry (default: --host).")
    var tlsServerName: String?

    @Option(
        help: """
            AUTH as this user of the node's auth file; the secret comes from --secret-file, or else the \
            CACHET_SECRET environment variable (never the command line).
            """
    )
    var user: String?

    @Option(help: "A file whose first line is the --user's secret.")
    var secretFile: String?

    @Argument(
        parsing: .captureForPassthrough,
        help:
            "A command to run once, e.g. get k1; watch [PREFIX] [--values] [--from RUN:SEQUENCE], which prints changes until interrupted; or hash-secret, which reads a secret on standard input and prints the hash an auth file stores"
    )
    var command: [String] = []

    func validate() throws {
        do throws(CachetCLIError) {
            try CachetCLIConnection.validate(host: host, port: port)
        } catch {
            throw ValidationError(error.message)
        }
        guard timeout > 0 && timeout.isFinite else { throw ValidationError("--timeout must be a positive number") }
        guard maxFrame >= 8 else { throw ValidationError("--max-frame must be at least 8 (the header)") }
        if !tls && (tlsCa != nil || tlsCert != nil || tlsKey != nil || tlsServerName != nil) {
            throw ValidationError("--tls-ca, --tls-cert, --tls-key and --tls-server-name need --tls")
        }
        if (tlsCert == nil) != (tlsKey == nil) {
            throw ValidationError("--tls-cert and --tls-key go together")
        }
        if secretFile != nil && user == nil { throw ValidationError("--secret-file needs --user") }
    }

    /// The user and secret `--user` asks for: the secret from `--secret-file`, else `CACHET_SECRET`.
    private func credentials() throws -> (user: String, secret: [UInt8])? {
        guard let user else { return nil }
        let secret: [UInt8]?
        do throws(CachetAuthError) {
            secret = try CachetSecretSource.read(file: secretFile, environmentVariable: "CACHET_SECRET")
        } catch {
            throw ValidationError("--secret-file: \(error.message)")
        }
        guard let secret else {
            throw ValidationError(
                "--user \(user) needs its secret: --secret-file FILE, or CACHET_SECRET in the environment"
            )
        }
        return (user, secret)
    }

    /// The TLS client context the flags ask for, nil without `--tls`.
    private func tlsContext() throws -> CachetTLSContext? {
        guard tls else { return nil }
        do throws(CachetIOError) {
            return try CachetTLSContext(
                role: .client,
                configuration: CachetTLSConfiguration(
                    certificateFile: tlsCert,
                    keyFile: tlsKey,
                    caFile: tlsCa,
                    serverName: tlsServerName ?? host
                )
            )
        } catch {
            throw ValidationError(error.message)
        }
    }

    func run() throws {
        // The passthrough argument takes --help too: answer it as ArgumentParser would, with the command
        // language after it.
        if command.first == "--help" || command.first == "-h" || command.first == "help" && command.count == 1 {
            emit([Self.helpMessage(), CachetCLICommand.helpText])
            return
        }
        if command == ["hash-secret"] {
            // The stored form of a secret read on standard input (its first line), for an auth file.
            guard let secret = readLine(strippingNewline: true), !secret.isEmpty else {
                emit(["ERROR: hash-secret reads the secret on standard input"])
                throw ExitCode(2)
            }
            emit(["\(CachetSecretHash(hashing: Array(secret.utf8)))"])
            return
        }
        if command.first == "watch" {
            try runWatch()
            return
        }
        let session = CachetCLISession(
            host: host,
            port: port,
            timeout: timeout,
            trace: trace,
            maximumReplyLength: maxFrame,
            cluster: cluster,
            tls: try tlsContext(),
            credentials: try credentials()
        )
        if isatty(STDERR_FILENO) == 1 {
            // Files sent or written in parts draw a progress bar; never into a pipe or a log.
            session.progress = CachetCLIProgress { text in FileHandle.standardError.write(Data(text.utf8)) }
        }
        if !command.isEmpty {
            let parsed: CachetCLICommand?
            do throws(CachetCLIError) {
                parsed = try CachetCLICommand.parse(words: command.map { Array($0.utf8) })
            } catch {
                emit(["ERROR: \(error.message)"])
                throw ExitCode(2)
            }
            guard let parsed else { return }
            let (lines, outcome) = session.run(parsed)
            emit(lines)
            switch outcome {
            case .ok, .quit: return
            case .notFound: throw ExitCode(1)
            case .error: throw ExitCode(2)
            }
        }
        let interactive = isatty(0) != 0
        var failed = false
        while true {
            if interactive {
                print("cachet> ", terminator: "")
                fflush(nil)
            }
            guard let line = readLine(strippingNewline: true) else { break }
            let (lines, outcome) = session.run(line: line)
            emit(lines)
            if outcome == .quit { break }
            if outcome == .error { failed = true }
        }
        if failed && !interactive { throw ExitCode(2) }
    }

    /// `watch [PREFIX] [--values] [--from RUN:SEQUENCE]`: the node's changes, one line each, until
    /// interrupted; with `--cluster`, every member's (from the node's STATS), each line marked with it.
    private func runWatch() throws {
        Self.exitOnInterrupt()
        let options: CachetCLIWatch.Options
        do throws(CachetCLIError) {
            options = try CachetCLIWatch.Options(words: command.dropFirst().map { Array($0.utf8) })
        } catch {
            emit(["ERROR: \(error.message)"])
            throw ExitCode(2)
        }
        let tls = try tlsContext()
        let credentials = try credentials()
        let (timeout, maxFrame) = (timeout, maxFrame)
        let connect: @Sendable (String, Int) throws(CachetCLIError) -> CachetCLIConnection = {
            host,
            port throws(CachetCLIError) in
            try CachetCLIConnection(
                host: host,
                port: port,
                timeout: timeout,
                maximumReplyLength: maxFrame,
                tls: tls,
                credentials: credentials
            )
        }
        var members: [(id: String, host: String, port: Int)] = []
        do throws(CachetCLIError) {
            let first = try connect(host, port)
            guard cluster else {
                try CachetCLIWatch.run(on: first, options: options) { emit([$0]) }
                return
            }
            members = Self.members(inStats: try first.send(.stats).response.body)
        } catch {
            emit(["ERROR: \(error.message)"])
            throw ExitCode(2)
        }
        guard !members.isEmpty else {
            emit(["ERROR: the node lists no cluster members (is it a cluster member, and the user an admin?)"])
            throw ExitCode(2)
        }
        let printing = NSLock()
        let group = DispatchGroup()
        for member in members {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                do throws(CachetCLIError) {
                    let connection = try connect(member.host, member.port)
                    try CachetCLIWatch.run(on: connection, options: options, member: member.id) { line in
                        printing.withLock { Self.printLine(line) }
                    }
                } catch {
                    printing.withLock { Self.printLine("[\(member.id)] ERROR: \(error.message)") }
                }
            }
        }
        group.wait()
    }

    /// SIGINT (Ctrl-C) and SIGTERM end a watch with status 0, even when the process was started with
    /// them blocked (as some process launchers do).
    private static func exitOnInterrupt() {
        var signals = sigset_t()
        sigemptyset(&signals)
        sigaddset(&signals, SIGINT)
        sigaddset(&signals, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
        signal(SIGINT) { _ in _exit(0) }
        signal(SIGTERM) { _ in _exit(0) }
    }

    private static func printLine(_ line: String) {
        Swift.print(line)
        fflush(nil)
    }

    /// The `cluster_members` of a STATS reply: id, host and port of each.
    static func members(inStats body: [UInt8]) -> [(id: String, host: String, port: Int)] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let members = object["cluster_members"] as? [[String: Any]]
        else { return [] }
        return members.compactMap { member in
            guard let id = member["id"] as? String, let host = member["host"] as? String,
                let port = member["port"] as? Int
            else { return nil }
            return (id, host, port)
        }
    }

    private func emit(_ lines: [String]) {
        for line in lines { print(line) }
        fflush(nil)
    }
}
