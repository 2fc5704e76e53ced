/// An error found while decoding a frame or a body.
///
/// Every error knows the ``CachetStatus`` a node answers with and whether the stream can still be trusted
/// (``closesConnection``). A framing error (a payload length below the header size or above the limit)
/// closes the connection; a body error is answered and the connection stays usable.
public struct CachetWireError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of error this is. New codes may be added without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: Hashable, Sendable {
            case payloadTooShort
            case payloadTooLarge
            case malformedBody
            case emptyKey
            case keyTooLong
            case unsupportedVersion
            case unknownOpcode
            case malformedReply
        }

        fileprivate var base: Base

        private init(_ base: Base) { self.base = base }

        /// A payload length below the 8-byte header: the stream cannot be trusted.
        public static let payloadTooShort = Code(.payloadTooShort)
        /// A payload length above the node's limit: the stream cannot be trusted.
        public static let payloadTooLarge = Code(.payloadTooLarge)
        /// A body whose length contradicts the lengths it declares, or a body where none belongs.
        public static let malformedBody = Code(.malformedBody)
        /// A key of zero bytes.
        public static let emptyKey = Code(.emptyKey)
        /// A key above ``CachetProtocol/maximumKeyLength``.
        public static let keyTooLong = Code(.keyTooLong)
        /// A request whose version byte is not ``CachetProtocol/version``.
        public static let unsupportedVersion = Code(.unsupportedVersion)
        /// A request whose opcode is not defined.
        public static let unknownOpcode = Code(.unknownOpcode)
        /// A reply body that does not have the shape its opcode requires.
        public static let malformedReply = Code(.malformedReply)

        /// The code's name.
        public var description: String {
            switch base {
            case .payloadTooShort: return "payloadTooShort"
            case .payloadTooLarge: return "payloadTooLarge"
            case .malformedBody: return "malformedBody"
            case .emptyKey: return "emptyKey"
            case .keyTooLong: return "keyTooLong"
            case .unsupportedVersion: return "unsupportedVersion"
            case .unknownOpcode: return "unknownOpcode"
            case .malformedReply: return "malformedReply"
            }
        }
    }

    /// What kind of error this is.
    public var code: Code
    /// A sentence saying what was wrong, suitable for an error reply's body.
    public var message: String

    /// Creates an error.
    /// - Parameters:
    ///   - code: the kind of error.
    ///   - message: what went wrong, in words a user can act on.
    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    /// The status a node answers this error with.
    public var status: CachetStatus {
        switch code.base {
        case .payloadTooShort, .malformedBody, .emptyKey, .malformedReply: return .badRequest
        case .payloadTooLarge, .keyTooLong: return .tooLarge
        case .unsupportedVersion: return .unsupportedVersion
        case .unknownOpcode: return .unknownOpcode
        }
    }

    /// Whether the connection must be closed after the error reply, because the framing is lost.
    public var closesConnection: Bool {
        code.base == .payloadTooShort || code.base == .payloadTooLarge
    }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }
}
