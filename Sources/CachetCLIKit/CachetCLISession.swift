public import CachetIO
public import CachetWire
import Foundation

/// Runs the client's commands against one node and renders the answers. The executable only reads lines
/// and prints what this returns.
public final class CachetCLISession {
    /// How a command ended, for exit codes.
    public enum Outcome: Sendable, Equatable {
        /// The node answered OK (or the command needed no node).
        case ok
        /// The node answered NOT_FOUND.
        case notFound
        /// Bad input, an error status, or a connection problem.
        case error
        /// `quit`.
        case quit
    }

    /// The node's address.
    public let host: String
    /// The node's port.
    public let port: Int
    /// Seconds allowed for connecting and for each reply.
    public let timeout: Double
    /// Whether every frame is printed as annotated hex.
    public let trace: Bool
    /// The largest reply payload accepted, in bytes.
    public let maximumReplyLength: Int
    /// Whether `stats` and `clear` ask the whole cluster (`--cluster`): they send the `cluster` flag and
    /// print every member by id.
    public let cluster: Bool
    /// The TLS client context (`--tls`); nil for plain TCP.
    public let tls: CachetTLSContext?
    /// The user and secret to AUTH with (`--user`); nil for none.
    let credentials: (user: String, secret: [UInt8])?
    private var connection: CachetCLIConnection?
    /// Where `put KEY @FILE` and `get KEY --out FILE` report their progress; nil (the default, and when
    /// standard error is not a terminal) for none.
    public var progress: CachetCLIProgress?

    /// Creates a session; it connects on the first command that needs the node.
    /// - Parameters:
    ///   - host: the node's IPv4 or IPv6 address, or its name.
    ///   - port: the node's port.
    ///   - timeout: seconds for connecting and for each reply.
    ///   - trace: print every frame.
    ///   - maximumReplyLength: the largest reply payload accepted; a peer announcing a longer one is
    ///     reported at once.
    ///   - cluster: whether `stats` and `clear` ask every member (the `cluster` request flag).
    public init(
        host: String,
        port: Int,
        timeout: Double = 5,
        trace: Bool = false,
        maximumReplyLength: Int = CachetProtocol.defaultMaximumPayloadLength,
        cluster: Bool = false,
        tls: CachetTLSContext? = nil,
        credentials: (user: String, secret: [UInt8])? = nil
    ) {
        self.tls = tls
        self.credentials = credentials
        self.cluster = cluster
        self.host = host
        self.port = port
        self.timeout = timeout
        self.trace = trace
        self.maximumReplyLength = maximumReplyLength
    }

    /// Runs one line.
    /// - Parameter line: a command line.
    /// - Returns: lines to print, in order, and the outcome.
    public func run(line: String) -> (lines: [String], outcome: Outcome) {
        do throws(CachetCLIError) {
            guard let command = try CachetCLICommand.parse(line) else { return ([], .ok) }
            return run(command)
        } catch {
            return (["ERROR: \(error.message)"], .error)
        }
    }

    /// Runs one parsed command.
    /// - Parameter command: the command.
    /// - Returns: lines to print and the outcome.
    public func run(_ command: CachetCLICommand) -> (lines: [String], outcome: Outcome) {
        var lines: [String] = []
        do throws(CachetCLIError) {
            let outcome = try execute(command, lines: &lines)
            return (lines, outcome)
        } catch {
            lines.append("ERROR: \(error.message)")
            return (lines, .error)
        }
    }

    private func execute(_ command: CachetCLICommand, lines: inout [String]) throws(CachetCLIError) -> Outcome {
        switch command {
        case .help:
            lines.append(
                contentsOf: CachetCLICommand.helpText.split(separator: "\n", omittingEmptySubsequences: false).map(
                    String.init
                )
            )
            return .ok
        case .quit:
            return .quit
        case .put(let key, let source, let ttl):
            let value: [UInt8]
            switch source {
            case .literal(let bytes): value = bytes
            case .file(let path):
                return try putFile(key: key, path: path, ttl: ttl, lines: &lines)
            }
            let reply = try send(.put(key: key, value: value, ttl: ttl), lines: &lines)
            return answer(reply, lines: &lines) { _ in "OK" }
        case .get(let key, .some(let output), let range):
            return try getToFile(key: key, path: output, range: range, lines: &lines)
        case .get(let key, nil, let range):
            let reply = try send(range.map { .rangedGet(key: key, range: $0) } ?? .get(key: key), lines: &lines)
            var body = reply.body
            var of = ""
            if range != nil {
                if reply.status == .rangeNotSatisfiable, let (total, _, _) = CachetValueRange.decodeReply(reply.body) {
                    lines.append("ERROR RANGE_NOT_SATISFIABLE: the range starts past the value's end (\(total) bytes)")
                    return .error
                }
                if reply.status == .ok, let (total, _, start) = CachetValueRange.decodeReply(reply.body) {
                    body = Array(reply.body[start...])
                    of = " of \(total)"
                }
            }
            return answer(reply, lines: &lines) { _ in
                CachetCLIFormatter.render(body) + (of.isEmpty ? "" : "  (\(body.count)\(of) bytes)")
            }
        case .delete(let key):
            let reply = try send(.delete(key: key), lines: &lines)
            return answer(reply, lines: &lines) { _ in "OK" }
        case .clear(let prefixes) where cluster:
            let reply = try send(prefixes.isEmpty ? .clear : .clearPrefixes(prefixes), flags: .cluster, lines: &lines)
            guard reply.status == .ok else { return answer(reply, lines: &lines) { _ in "" } }
            let (rendered, allAnswered) = CachetCLIFormatter.clusterClear(reply.body)
            lines += rendered
            return allAnswered ? .ok : .error
        case .stats where cluster:
            let reply = try send(.stats, flags: .cluster, lines: &lines)
            guard reply.status == .ok else { return answer(reply, lines: &lines) { _ in "" } }
            let (rendered, allAnswered) = CachetCLIFormatter.clusterStats(reply.body)
            lines += rendered
            return allAnswered ? .ok : .error
        case .clear(let prefixes):
            let reply = try send(prefixes.isEmpty ? .clear : .clearPrefixes(prefixes), lines: &lines)
            return answer(reply, lines: &lines) { reply in
                guard let result = try? CachetClearResult(decoding: reply.body) else { return "OK" }
                return "OK (removed \(result.items) items, \(result.bytes) bytes)"
            }
        case .stats:
            let reply = try send(.stats, lines: &lines)
            if reply.status == .ok {
                lines.append(contentsOf: CachetCLIFormatter.statsTable(reply.body))
                return .ok
            }
            return answer(reply, lines: &lines) { _ in "" }
        case .ping:
            let start = DispatchTime.now()
            let reply = try send(.ping, lines: &lines)
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6
            return answer(reply, lines: &lines) { _ in "PONG (\(String(format: "%.2f", elapsed)) ms)" }
        }
    }

    func answer(_ reply: CachetResponse, lines: inout [String], ok: (CachetResponse) -> String) -> Outcome {
        switch reply.status {
        case .ok:
            lines.append(ok(reply))
            return .ok
        case .notFound:
            lines.append("(not found)")
            return .notFound
        default:
            lines.append("ERROR \(reply.status): \(reply.bodyText)")
            return .error
        }
    }

    func send(
        _ command: CachetCommand,
        flags: CachetRequestFlags = [],
        lines: inout [String]
    ) throws(CachetCLIError) -> CachetResponse {
        if connection == nil {
            connection = try CachetCLIConnection(
                host: host,
                port: port,
                timeout: timeout,
                maximumReplyLength: maximumReplyLength,
                tls: tls,
                credentials: credentials
            )
        }
        do throws(CachetCLIError) {
            let (response, sent, received) = try connection!.send(command, flags: flags)
            if trace {
                lines += CachetCLIFormatter.trace(sent, outgoing: true)
                lines += CachetCLIFormatter.trace(received, outgoing: false)
            }
            return response
        } catch {
            // Drop the connection; the next command connects again.
            connection = nil
            throw error
        }
    }
}
