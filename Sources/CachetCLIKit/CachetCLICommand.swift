public import CachetWire

/// Where a PUT's value comes from.
public enum CachetCLIValueSource: Sendable, Equatable {
    /// The bytes typed on the line.
    case literal([UInt8])
    /// A file, named as `@PATH`.
    case file(String)
}

/// One command of the debugging client's language.
public enum CachetCLICommand: Sendable, Equatable {
    /// `put KEY VALUE [--ttl SECONDS]` or `put KEY @FILE [--ttl SECONDS]`.
    case put(key: [UInt8], value: CachetCLIValueSource, ttl: UInt32)
    /// `get KEY [--range A-B | --range A-] [--out FILE]`: the value, or the bytes A to B (both included) or A
    /// to the end.
    case get(key: [UInt8], output: String?, range: CachetValueRange? = nil)
    /// `del KEY`.
    case delete(key: [UInt8])
    /// `clear [PREFIX...]`: every key, or those that start with one of the prefixes.
    case clear(prefixes: [[UInt8]])
    /// `stats`.
    case stats
    /// `ping`.
    case ping
    /// `help`.
    case help
    /// `quit` (or `exit`).
    case quit

    /// The help text.
    public static let helpText = """
        commands:
          put KEY VALUE [--ttl SECONDS]   store VALUE under KEY (TTL 0 or absent: no expiry)
          put KEY @FILE [--ttl SECONDS]   store the bytes of FILE, of any size (in parts of 1 MiB
                                          when longer, with a progress bar on a terminal)
          get KEY [--out FILE]            print the value (UTF-8 as text, anything else as 0x-hex),
                                          or write its raw bytes to FILE (read by ranges: any size)
          get KEY --range A-B [--out FILE]  bytes A to B of the value (both included; A- to the end)
          del KEY                         remove KEY
          clear [PREFIX...]               remove every entry of the node, or those whose keys
                                          start with one of the prefixes
          stats                           the node's counters
          ping                            round-trip time to the node
          help                            this text
        and from the command line only: cachet-cli watch [PREFIX] [--values] [--from RUN:SEQUENCE]
                                          prints each change of keys under PREFIX until interrupted
          quit                            leave
        quote words with spaces: put "my key" "a value"; inside quotes \\" \\\\ \\n \\t \\xNN are escapes
        """

    /// `A-B` (bytes A to B, both included) or `A-` (A to the end), as HTTP's byte ranges.
    static func byteRange(_ text: [UInt8]) throws(CachetCLIError) -> CachetValueRange {
        let parts = String(decoding: text, as: UTF8.self).split(separator: "-", omittingEmptySubsequences: false)
        let bad = CachetCLIError(
            code: .usage,
            message: "--range takes A-B (bytes A to B, both included) or A- (from A to the end), A ≤ B"
        )
        guard parts.count == 2, let first = UInt64(parts[0]) else { throw bad }
        if parts[1].isEmpty { return CachetValueRange(offset: first) }
        guard let last = UInt64(parts[1]), last >= first, last < UInt64.max else { throw bad }
        return CachetValueRange(offset: first, length: last - first + 1)
    }

    /// Parses one line.
    /// - Parameter line: the command line.
    /// - Returns: the command, or nil for an empty line.
    /// - Throws: ``CachetCLIError`` `syntax` or `usage` with a hint.
    public static func parse(_ line: String) throws(CachetCLIError) -> CachetCLICommand? {
        try parse(words: CachetCLITokenizer.tokenize(line))
    }

    /// Parses words already split, as from the command line of the executable.
    /// - Parameter words: the words.
    /// - Returns: the command, or nil when there are no words.
    /// - Throws: ``CachetCLIError`` `usage` with a hint.
    public static func parse(words: [[UInt8]]) throws(CachetCLIError) -> CachetCLICommand? {
        guard let first = words.first else { return nil }
        let name = String(decoding: first, as: UTF8.self).lowercased()
        var arguments = Array(words.dropFirst())
        func usage(_ text: String) -> CachetCLIError { CachetCLIError(code: .usage, message: "usage: \(text)") }
        func option(_ flag: String) throws(CachetCLIError) -> [UInt8]? {
            guard let index = arguments.firstIndex(of: Array(flag.utf8)) else { return nil }
            guard index + 1 < arguments.count else {
                throw CachetCLIError(code: .usage, message: "\(flag) needs a value")
            }
            let value = arguments[index + 1]
            arguments.removeSubrange(index...(index + 1))
            return value
        }
        switch name {
        case "put", "set":
            var ttl: UInt32 = 0
            if let text = try option("--ttl") {
                guard let seconds = UInt32(String(decoding: text, as: UTF8.self)) else {
                    throw CachetCLIError(code: .usage, message: "--ttl takes whole seconds from 0 to 4294967295")
                }
                ttl = seconds
            }
            guard arguments.count == 2 else { throw usage("put KEY VALUE [--ttl SECONDS] or put KEY @FILE") }
            let value = arguments[1]
            if value.first == UInt8(ascii: "@") && value.count > 1 {
                return .put(
                    key: arguments[0],
                    value: .file(String(decoding: value.dropFirst(), as: UTF8.self)),
                    ttl: ttl
                )
            }
            return .put(key: arguments[0], value: .literal(value), ttl: ttl)
        case "get":
            let output = try option("--out").map { String(decoding: $0, as: UTF8.self) }
            let range = try option("--range").map { (text) throws(CachetCLIError) in try byteRange(text) }
            guard arguments.count == 1 else { throw usage("get KEY [--range A-B] [--out FILE]") }
            return .get(key: arguments[0], output: output, range: range)
        case "del", "delete":
            guard arguments.count == 1 else { throw usage("del KEY") }
            return .delete(key: arguments[0])
        case "clear":
            guard arguments.count <= CachetBodyDecoder.maximumClearPrefixes, !arguments.contains(where: \.isEmpty)
            else {
                throw usage("clear [PREFIX...] (at most \(CachetBodyDecoder.maximumClearPrefixes) non-empty prefixes)")
            }
            return .clear(prefixes: arguments)
        case "stats", "ping", "help", "quit", "exit":
            guard arguments.isEmpty else { throw usage("\(name) takes no arguments") }
            switch name {
            case "stats": return .stats
            case "ping": return .ping
            case "help": return .help
            default: return .quit
            }
        case "watch":
            throw usage(
                "watch runs as a command of its own: cachet-cli watch [PREFIX] [--values] [--from RUN:SEQUENCE]"
            )
        default:
            throw CachetCLIError(code: .usage, message: "unknown command '\(name)'; type help for the list")
        }
    }
}
