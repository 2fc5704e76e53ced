public import CachetWire

/// `cachet-cli watch [PREFIX] [--values] [--from RUN:SEQUENCE]`: the changes of keys under PREFIX, one
/// line each, until interrupted (`Protocol/PROTOCOL.md`, "WATCH").
public enum CachetCLIWatch {
    /// What `watch` was asked for.
    public struct Options: Sendable, Equatable {
        /// The key prefix (empty: every key).
        public var prefix: [UInt8]
        /// Whether PUT events show their values.
        public var values: Bool
        /// Where to resume (a position a previous `watch` printed).
        public var from: CachetWatchPosition?

        /// Parses the words after `watch`.
        /// - Throws: ``CachetCLIError`` `usage`.
        public init(words: [[UInt8]]) throws(CachetCLIError) {
            prefix = []
            values = false
            from = nil
            var rest = words[...]
            func usage(_ text: String) -> CachetCLIError {
                CachetCLIError(code: .usage, message: "usage: watch [PREFIX] [--values] [--from RUN:SEQUENCE]; \(text)")
            }
            var prefixSeen = false
            while let word = rest.popFirst() {
                switch String(decoding: word, as: UTF8.self) {
                case "--values": values = true
                case "--from":
                    guard let text = rest.popFirst().map({ String(decoding: $0, as: UTF8.self) }),
                        let position = CachetWatchPosition(text)
                    else { throw usage("--from takes the RUN:SEQUENCE a watch printed") }
                    from = position
                case "--":
                    // Whatever follows is the prefix, even one that starts with "--".
                    guard !prefixSeen, rest.count <= 1 else { throw usage("one prefix at most") }
                    prefixSeen = true
                    prefix = rest.popFirst() ?? []
                default:
                    if word.starts(with: Array("--".utf8)) {
                        let option = String(decoding: word, as: UTF8.self)
                        throw usage(
                            "unknown option \(option) (a prefix that starts with -- goes after --: watch -- \(option))"
                        )
                    }
                    guard !prefixSeen else { throw usage("one prefix at most") }
                    prefixSeen = true
                    prefix = word
                }
            }
        }
    }

    /// One event as a line: `SEQUENCE KIND KEY`, then ` = VALUE` and ` (ttl N s)` for a PUT; a GAP says
    /// what to do. `member` prefixes it in a cluster-wide watch.
    public static func line(_ event: CachetEvent, member: String? = nil) -> String {
        let origin = member.map { "[\($0)] " } ?? ""
        if event.kind == .gap {
            return origin + "\(event.sequence) gap: changes were missed; reload what you hold"
        }
        var text = origin + "\(event.sequence) \(event.kind) \(CachetCLIFormatter.render(event.key))"
        if let value = event.value { text += " = " + CachetCLIFormatter.render(value) }
        if event.valueOmitted { text += " (value too long to show)" }
        if event.kind == .put && event.ttl > 0 { text += " (ttl \(event.ttl) s)" }
        return text
    }

    /// Watches one node until its connection ends or `stop` says so, calling `emit` with each line.
    /// - Throws: ``CachetCLIError`` when the node refuses the WATCH or the connection fails.
    public static func run(
        on connection: CachetCLIConnection,
        options: Options,
        member: String? = nil,
        stop: () -> Bool = { false },
        emit: (String) -> Void
    ) throws(CachetCLIError) {
        let request = CachetWatchRequest(
            prefix: options.prefix,
            includesValues: options.values,
            maximumValueLength: 64 << 10,
            resumingAfter: options.from
        )
        let reply = try connection.send(.watch(request)).response
        guard reply.status == .ok, reply.body.count == 16 else {
            throw CachetCLIError(
                code: .connection,
                message: "WATCH refused: \(reply.status) " + String(decoding: reply.body, as: UTF8.self)
            )
        }
        let run = reply.body[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let sequence = reply.body[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let origin = member.map { "[\($0)] " } ?? ""
        emit(
            origin + "watching '\(CachetCLIFormatter.render(options.prefix))' on \(connection.host):\(connection.port) "
                + "after \(CachetWatchPosition(run: run, sequence: sequence)) (run:sequence; --from resumes)"
        )
        while !stop() {
            guard let frame = try connection.nextFrame(within: 1) else { continue }
            guard frame.opcode == .event else { continue }
            do {
                emit(line(try CachetEvent(decoding: frame.body), member: member))
            } catch {
                emit(origin + "ERROR: \(error.message)")
            }
        }
    }
}
