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
        abstract: "Talks to a Cachet node: put, get, del, clear, stats, ping.",
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
            "A command to run once, e.g. get k1; or hash-secret, which reads a secret on standard input and prints the hash an auth file stores"
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
        if command == ["hash-secret"] {
            // The stored form of a secret read on standard input (its first line), for an auth file.
            guard let secret = readLine(strippingNewline: true), !secret.isEmpty else {
                emit(["ERROR: hash-secret reads the secret on standard input"])
                throw ExitCode(2)
            }
            emit(["\(CachetSecretHash(hashing: Array(secret.utf8)))"])
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

    private func emit(_ lines: [String]) {
        for line in lines { print(line) }
        fflush(nil)
    }
}
