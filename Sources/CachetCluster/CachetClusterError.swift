/// An error reading a cluster file or building a ``CachetMembership``: the file cannot be read, is not
/// JSON, or describes members that do not make a cluster.
///
/// The message names the file (when there is one), the member at fault as `members[i]` (its position in
/// the file, from 0) with its id, and what to change. `Code` wraps a private enum, so adding a code breaks
/// no caller.
public struct CachetClusterError: Error, Sendable, CustomStringConvertible {
    /// What kind of error this is. New codes may be added without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: Hashable, Sendable {
            case unreadableFile
            case invalidJSON
            case missingField
            case unknownField
            case wrongType
            case noMembers
            case emptyID
            case invalidID
            case duplicateID
            case invalidHost
            case duplicateAddress
            case portOutOfRange
            case virtualNodeCountOutOfRange
            case unknownMember
        }

        fileprivate var base: Base

        private init(_ base: Base) { self.base = base }

        /// The file does not exist, cannot be opened or read, or is too large.
        public static let unreadableFile = Code(.unreadableFile)
        /// The bytes are not JSON (RFC 8259); the message gives the line and column.
        public static let invalidJSON = Code(.invalidJSON)
        /// A required field (`members`, a member's `host` or `port`) is missing.
        public static let missingField = Code(.missingField)
        /// A field the format does not define (often a misspelt one), or a field given twice.
        public static let unknownField = Code(.unknownField)
        /// A field has the wrong JSON type, such as a port given as a string.
        public static let wrongType = Code(.wrongType)
        /// The member list is empty.
        public static let noMembers = Code(.noMembers)
        /// A member's id is the empty string.
        public static let emptyID = Code(.emptyID)
        /// A member's id is longer than ``CachetClusterMember/maximumIDLength`` bytes or contains
        /// whitespace or control characters.
        public static let invalidID = Code(.invalidID)
        /// Two members have the same id (compared as UTF-8 bytes).
        public static let duplicateID = Code(.duplicateID)
        /// A member's host is empty, too long, or contains whitespace or control characters.
        public static let invalidHost = Code(.invalidHost)
        /// Two members have the same host and port.
        public static let duplicateAddress = Code(.duplicateAddress)
        /// A port is outside 1...65535.
        public static let portOutOfRange = Code(.portOutOfRange)
        /// `virtual_nodes_per_member` is outside `CachetRing.virtualNodesPerMemberRange`.
        public static let virtualNodeCountOutOfRange = Code(.virtualNodeCountOutOfRange)
        /// A member was asked for by an id the membership does not have.
        public static let unknownMember = Code(.unknownMember)

        /// The code's name.
        public var description: String {
            switch base {
            case .unreadableFile: return "unreadableFile"
            case .invalidJSON: return "invalidJSON"
            case .missingField: return "missingField"
            case .unknownField: return "unknownField"
            case .wrongType: return "wrongType"
            case .noMembers: return "noMembers"
            case .emptyID: return "emptyID"
            case .invalidID: return "invalidID"
            case .duplicateID: return "duplicateID"
            case .invalidHost: return "invalidHost"
            case .duplicateAddress: return "duplicateAddress"
            case .portOutOfRange: return "portOutOfRange"
            case .virtualNodeCountOutOfRange: return "virtualNodeCountOutOfRange"
            case .unknownMember: return "unknownMember"
            }
        }
    }

    /// What kind of error this is.
    public var code: Code
    /// A sentence saying what was wrong, where, and what to do.
    public var message: String
    /// The cluster file at fault, when the membership was read from one.
    public var file: String?
    /// The position in the member list (from 0) of the member at fault, when one is.
    public var memberIndex: Int?
    /// The error underneath, if any (such as the ring's for a virtual node count).
    public var underlying: (any Error & Sendable)?

    /// Creates an error.
    /// - Parameters:
    ///   - code: the kind of error.
    ///   - message: what went wrong, in words a user can act on.
    ///   - file: the cluster file at fault, if any.
    ///   - memberIndex: the position of the member at fault, if any.
    ///   - underlying: the error underneath, if any.
    public init(
        code: Code,
        message: String,
        file: String? = nil,
        memberIndex: Int? = nil,
        underlying: (any Error & Sendable)? = nil
    ) {
        self.code = code
        self.message = message
        self.file = file
        self.memberIndex = memberIndex
        self.underlying = underlying
    }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }
}
