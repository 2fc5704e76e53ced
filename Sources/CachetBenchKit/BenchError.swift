/// An error of the load generator: a bad configuration, a server that cannot be reached, or a server
/// whose replies break the protocol.
public struct BenchError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of error this is. New codes may be added without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: Hashable, Sendable {
            case invalidConfiguration
            case connectionFailed
            case connectionLost
            case malformedReply
            case repliesMissing
        }

        fileprivate var base: Base

        private init(_ base: Base) { self.base = base }

        /// A flag's value is out of range or contradicts another flag.
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// A connection could not be opened.
        public static let connectionFailed = Code(.connectionFailed)
        /// A server closed a connection or the connection failed while requests were in flight.
        public static let connectionLost = Code(.connectionLost)
        /// A server sent bytes that are not a reply of the protocol spoken, or a reply nobody asked for.
        public static let malformedReply = Code(.malformedReply)
        /// Replies were still missing long after the run ended.
        public static let repliesMissing = Code(.repliesMissing)

        /// The code's name.
        public var description: String {
            switch base {
            case .invalidConfiguration: return "invalidConfiguration"
            case .connectionFailed: return "connectionFailed"
            case .connectionLost: return "connectionLost"
            case .malformedReply: return "malformedReply"
            case .repliesMissing: return "repliesMissing"
            }
        }
    }

    /// What kind of error this is.
    public var code: Code
    /// What went wrong and, where it helps, what to do.
    public var message: String

    /// Creates an error.
    /// - Parameters:
    ///   - code: what kind of error this is.
    ///   - message: what went wrong.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The message.
    public var description: String { message }
}
