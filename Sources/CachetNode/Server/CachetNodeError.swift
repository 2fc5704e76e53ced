/// An error starting or running a node.
///
/// `Code` wraps a private enum, so adding a code breaks no caller.
public struct CachetNodeError: Error, Sendable, CustomStringConvertible {
    /// What kind of error this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: Hashable, Sendable {
            case invalidConfiguration
            case addressUnusable
            case resourceExhausted
            case storageUnusable
        }

        fileprivate var base: Base
        private init(_ base: Base) { self.base = base }

        /// A flag or setting is out of range.
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// The listening address could not be resolved, bound or listened on.
        public static let addressUnusable = Code(.addressUnusable)
        /// The system refused a descriptor, a thread or memory.
        public static let resourceExhausted = Code(.resourceExhausted)
        /// The disk tier could not be opened.
        public static let storageUnusable = Code(.storageUnusable)

        /// The code's name.
        public var description: String {
            switch base {
            case .invalidConfiguration: return "invalidConfiguration"
            case .addressUnusable: return "addressUnusable"
            case .resourceExhausted: return "resourceExhausted"
            case .storageUnusable: return "storageUnusable"
            }
        }
    }

    /// What kind of error this is.
    public var code: Code
    /// What went wrong and what to do about it.
    public var message: String
    /// The error underneath, if any.
    public var underlying: (any Error & Sendable)?

    /// Creates an error.
    /// - Parameters:
    ///   - code: the kind of error.
    ///   - message: what went wrong, in words a user can act on.
    ///   - underlying: the error underneath, if any.
    public init(code: Code, message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    /// The message, followed by the underlying error when there is one.
    public var description: String {
        // An error wrapped with its own words as the message is said once.
        if let underlying, !message.contains("\(underlying)") { return "\(message) (\(underlying))" }
        return message
    }
}
