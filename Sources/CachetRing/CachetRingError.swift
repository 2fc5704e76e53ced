/// An error building or changing a ``CachetRing``: a member list or a virtual node count that does not
/// make a ring.
public struct CachetRingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of error this is. New codes may be added without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: Hashable, Sendable {
            case noMembers
            case emptyMemberName
            case duplicateMember
            case unknownMember
            case virtualNodeCountOutOfRange
        }

        fileprivate var base: Base

        private init(_ base: Base) { self.base = base }

        /// No member was given, or the last member would be removed.
        public static let noMembers = Code(.noMembers)
        /// A member's name is the empty string.
        public static let emptyMemberName = Code(.emptyMemberName)
        /// The same member is named twice, or a member is added that is already there.
        public static let duplicateMember = Code(.duplicateMember)
        /// A member is removed that is not in the ring.
        public static let unknownMember = Code(.unknownMember)
        /// The virtual node count is outside ``CachetRing/virtualNodesPerMemberRange``.
        public static let virtualNodeCountOutOfRange = Code(.virtualNodeCountOutOfRange)

        /// The code's name.
        public var description: String {
            switch base {
            case .noMembers: return "noMembers"
            case .emptyMemberName: return "emptyMemberName"
            case .duplicateMember: return "duplicateMember"
            case .unknownMember: return "unknownMember"
            case .virtualNodeCountOutOfRange: return "virtualNodeCountOutOfRange"
            }
        }
    }

    /// What kind of error this is.
    public var code: Code
    /// A sentence saying what was wrong and what to do.
    public var message: String

    /// Creates an error.
    /// - Parameters:
    ///   - code: the kind of error.
    ///   - message: what went wrong, in words a user can act on.
    public init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }
}
