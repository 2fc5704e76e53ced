#if canImport(Glibc)
import Glibc
#endif

/// An error of the transport: a bad address, a name that does not resolve, a refused or timed-out
/// connection, a failed system call, or a connection that broke.
public struct CachetIOError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of error this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: Hashable, Sendable {
            case invalidAddress
            case resolutionFailed
            case connectionRefused
            case timedOut
            case connectionFailed
            case connectionClosed
            case listenFailed
            case resourceExhausted
            case loopStopped
            case tlsConfiguration
            case tlsHandshakeFailed
        }

        fileprivate var base: Base
        private init(_ base: Base) { self.base = base }

        /// A host or port that cannot be an address (bad syntax, a port outside 0...65535).
        public static let invalidAddress = Code(.invalidAddress)
        /// A host name that getaddrinfo could not resolve.
        public static let resolutionFailed = Code(.resolutionFailed)
        /// Nothing listens at the address (ECONNREFUSED).
        public static let connectionRefused = Code(.connectionRefused)
        /// A connect, a read or a write did not complete within its deadline.
        public static let timedOut = Code(.timedOut)
        /// A connect failed for another reason (unreachable network, reset while connecting...).
        public static let connectionFailed = Code(.connectionFailed)
        /// The peer closed or reset an established connection, or a send or receive failed on it.
        public static let connectionClosed = Code(.connectionClosed)
        /// socket, bind or listen failed for a listening socket.
        public static let listenFailed = Code(.listenFailed)
        /// The process ran out of descriptors or memory (socket, epoll_create, eventfd failed).
        public static let resourceExhausted = Code(.resourceExhausted)
        /// The event loop was stopped while the operation was pending.
        public static let loopStopped = Code(.loopStopped)
        /// A TLS certificate, key or CA file cannot be read or does not fit (``CachetTLSContext``).
        public static let tlsConfiguration = Code(.tlsConfiguration)
        /// The TLS handshake failed (a certificate that does not verify, a peer that does not speak TLS) or
        /// did not finish in time.
        public static let tlsHandshakeFailed = Code(.tlsHandshakeFailed)

        /// The code's name.
        public var description: String {
            switch base {
            case .invalidAddress: return "invalidAddress"
            case .resolutionFailed: return "resolutionFailed"
            case .connectionRefused: return "connectionRefused"
            case .timedOut: return "timedOut"
            case .connectionFailed: return "connectionFailed"
            case .connectionClosed: return "connectionClosed"
            case .listenFailed: return "listenFailed"
            case .resourceExhausted: return "resourceExhausted"
            case .loopStopped: return "loopStopped"
            case .tlsConfiguration: return "tlsConfiguration"
            case .tlsHandshakeFailed: return "tlsHandshakeFailed"
            }
        }
    }

    /// What kind of error this is.
    public var code: Code
    /// What went wrong and what to do.
    public var message: String
    /// The `errno` of the failed system call, or 0 when none failed.
    public var systemError: Int32

    /// Creates an error.
    /// - Parameters:
    ///   - code: the kind.
    ///   - message: the explanation.
    ///   - systemError: the `errno` behind it, 0 if none.
    public init(code: Code, message: String, systemError: Int32 = 0) {
        self.code = code
        self.message = message
        self.systemError = systemError
    }

    /// The message.
    public var description: String { message }

    /// `strerror` of an errno value.
    static func describe(_ code: Int32) -> String { String(cString: strerror(code)) }

    /// The error for a connect to `address` that failed with `code` (an errno value).
    static func connectFailure(_ code: Int32, address: String) -> CachetIOError {
        switch code {
        case ECONNREFUSED:
            return CachetIOError(
                code: .connectionRefused,
                message: "cannot connect to \(address): connection refused (is the server running, on that port?)",
                systemError: code
            )
        case ETIMEDOUT:
            return CachetIOError(
                code: .timedOut,
                message: "cannot connect to \(address): timed out (is the host up and the port open?)",
                systemError: code
            )
        case EMFILE, ENFILE, ENOBUFS, ENOMEM:
            return CachetIOError(
                code: .resourceExhausted,
                message: "cannot connect to \(address): \(describe(code)) (raise the descriptor limit, ulimit -n)",
                systemError: code
            )
        default:
            return CachetIOError(
                code: .connectionFailed,
                message: "cannot connect to \(address): \(describe(code))",
                systemError: code
            )
        }
    }
}
