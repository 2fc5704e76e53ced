/// Why a ``CachetClient`` call failed.
///
/// A struct with a ``code`` to act on, a ``message`` for people, the ``node`` it concerns (when one
/// does) and the ``underlying`` error (when another layer reported it). New codes may be added without
/// breaking callers: match on the codes you handle and treat the rest as failures.
public struct CachetClientError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: Hashable, Sendable {
            case timeout
            case connectionFailed
            case unavailable
            case tooLarge
            case badRequest
            case serverError
            case protocolViolation
            case shutdown
            case cancelled
            case invalidConfiguration
            case notAuthenticated
            case forbidden
            case encodingFailed
            case decodingFailed
            case notStored
            case rangeNotSatisfiable
            case notFound
            case valueChanged
            case file
        }

        fileprivate var base: Base

        private init(_ base: Base) { self.base = base }

        /// The node did not answer (or a connection did not open) within the configured timeout.
        public static let timeout = Code(.timeout)
        /// A connection could not be opened, or closed with requests in flight.
        public static let connectionFailed = Code(.connectionFailed)
        /// No node that could serve the key is up, or the node answered UNAVAILABLE.
        public static let unavailable = Code(.unavailable)
        /// A key or value exceeds a limit, checked before sending, or the node answered TOO_LARGE.
        public static let tooLarge = Code(.tooLarge)
        /// The request is malformed (an empty key), checked before sending, or the node answered
        /// BAD_REQUEST, UNKNOWN_OPCODE or UNSUPPORTED_VERSION.
        public static let badRequest = Code(.badRequest)
        /// The node failed while serving the request (SERVER_ERROR, or a status this client does not know).
        public static let serverError = Code(.serverError)
        /// The node sent bytes that are not a valid reply; the connection was closed.
        public static let protocolViolation = Code(.protocolViolation)
        /// The client was shut down before or while the request was served.
        public static let shutdown = Code(.shutdown)
        /// The calling task was cancelled.
        public static let cancelled = Code(.cancelled)
        /// The configuration cannot be used (no nodes, a node named twice, a timeout out of range).
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// The node requires a user and the configured credentials are missing or refused
        /// (NOT_AUTHENTICATED).
        public static let notAuthenticated = Code(.notAuthenticated)
        /// The configured user may not send this request: its role or key prefixes (FORBIDDEN).
        public static let forbidden = Code(.forbidden)
        /// A typed value could not be turned into bytes by the client's ``CachetCoder`` (nothing was sent).
        public static let encodingFailed = Code(.encodingFailed)
        /// The bytes under a key are not a value of the type asked for in the client's ``CachetCoder``'s
        /// format (written by another type, or another coder); the message names the key and the type.
        public static let decodingFailed = Code(.decodingFailed)
        /// A PUT that carried a read-through lease was not stored: the key was written or deleted since
        /// the lease was granted, or the lease expired (NOT_STORED).
        public static let notStored = Code(.notStored)
        /// A GET of a range that starts past the value's end (RANGE_NOT_SATISFIABLE); the message gives the
        /// value's length.
        public static let rangeNotSatisfiable = Code(.rangeNotSatisfiable)
        /// A stream of a value (``CachetClient/stream(_:partSize:)-(String,_)``) found no value under the key.
        public static let notFound = Code(.notFound)
        /// A value read in several ranges was replaced between two of them (its tag changed): what was
        /// read so far belongs to the older value. Read it again.
        public static let valueChanged = Code(.valueChanged)
        /// A file to store or to write a value to could not be read or written.
        public static let file = Code(.file)

        /// The code's name.
        public var description: String {
            switch base {
            case .timeout: return "timeout"
            case .connectionFailed: return "connectionFailed"
            case .unavailable: return "unavailable"
            case .tooLarge: return "tooLarge"
            case .badRequest: return "badRequest"
            case .serverError: return "serverError"
            case .protocolViolation: return "protocolViolation"
            case .shutdown: return "shutdown"
            case .cancelled: return "cancelled"
            case .invalidConfiguration: return "invalidConfiguration"
            case .notAuthenticated: return "notAuthenticated"
            case .forbidden: return "forbidden"
            case .encodingFailed: return "encodingFailed"
            case .decodingFailed: return "decodingFailed"
            case .notStored: return "notStored"
            case .rangeNotSatisfiable: return "rangeNotSatisfiable"
            case .notFound: return "notFound"
            case .valueChanged: return "valueChanged"
            case .file: return "file"
            }
        }
    }

    /// What kind of failure this is.
    public var code: Code
    /// What went wrong and what to do about it.
    public var message: String
    /// The node concerned, by its member id (`host:port` unless configured otherwise), if any.
    public var node: String?
    /// The error reported by a lower layer (a system call, the wire codec), if any.
    public var underlying: (any Error & Sendable)?

    /// Creates an error.
    /// - Parameters:
    ///   - code: the kind of failure.
    ///   - message: what went wrong and what to do.
    ///   - node: the node concerned.
    ///   - underlying: the lower-level error.
    public init(code: Code, message: String, node: String? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.node = node
        self.underlying = underlying
    }

    /// `code: message (node N)`.
    public var description: String {
        var text = "\(code): \(message)"
        if let node { text += " (node \(node))" }
        if let underlying { text += " [\(underlying)]" }
        return text
    }
}
