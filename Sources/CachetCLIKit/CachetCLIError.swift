/// An error of the debugging client: bad input, an unreadable file, or a connection problem.
public struct CachetCLIError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of error this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: Hashable, Sendable {
            case syntax
            case usage
            case file
            case connection
            case timeout
            case protocolViolation
        }

        fileprivate var base: Base
        private init(_ base: Base) { self.base = base }

        /// The line could not be split into words (an unterminated quote, a bad escape).
        public static let syntax = Code(.syntax)
        /// Unknown command or wrong arguments.
        public static let usage = Code(.usage)
        /// A file named with `@FILE` or `--out` could not be read or written.
        public static let file = Code(.file)
        /// The node could not be reached, or the connection broke.
        public static let connection = Code(.connection)
        /// The node did not answer in time.
        public static let timeout = Code(.timeout)
        /// The node answered with bytes that are not a valid reply.
        public static let protocolViolation = Code(.protocolViolation)

        /// The code's name.
        public var description: String {
            switch base {
            case .syntax: return "syntax"
            case .usage: return "usage"
            case .file: return "file"
            case .connection: return "connection"
            case .timeout: return "timeout"
            case .protocolViolation: return "protocol"
            }
        }
    }

    /// What kind of error this is.
    public var code: Code
    /// What went wrong and what to do.
    public var message: String

    /// Creates an error.
    /// - Parameters:
    ///   - code: the kind.
    ///   - message: the explanation.
    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    /// The message.
    public var description: String { message }
}
