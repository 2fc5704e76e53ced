/// The `id`, `host` and `port` of one member object, written the same way in a cluster file's `members`
/// (`Protocol/CLUSTER.md`) and in a node's STATS `cluster_members` (`Protocol/PROTOCOL.md`, "STATS"): the
/// one reading of a member object, which both parsers word their own errors around. Each field is nil when
/// the object does not have it (or, read leniently, has it with another type).
struct ClusterMemberFields {
    var id: String?
    var host: String?
    var port: Int?

    /// Why a member object could not be read: what each caller needs to word its own message.
    enum Problem: Error {
        /// The element is not an object.
        case notAnObject(typeName: String)
        /// `id` or `host` is not a string, or `port` is not an integer (strict reading only).
        case wrongType(key: String, typeName: String)
        /// A field other than `id`, `host` and `port` (strict reading only); `offset` is where its value starts.
        case unknownField(key: String, offset: Int)
    }

    /// Reads a member object's fields in document order.
    /// - Parameters:
    ///   - element: one element of a members list.
    ///   - strict: a cluster file (true): the first field of another type or name is a problem. A STATS reply
    ///     (false): such fields are skipped (the node's own view, such as `state`, sits beside each member),
    ///     so an `id`, `host` or `port` of another type reads as absent.
    /// - Throws: ``Problem``; only ``Problem/notAnObject(typeName:)`` when not `strict`.
    init(_ element: ClusterJSON, strict: Bool) throws(Problem) {
        guard case .object(let fields) = element.value else { throw .notAnObject(typeName: element.typeName) }
        for (key, value) in fields {
            switch (key, value.value) {
            case ("id", .string(let text)): id = text
            case ("host", .string(let text)): host = text
            case ("port", .integer(let number)): port = number
            case _ where !strict: continue
            case ("id", _), ("host", _), ("port", _): throw .wrongType(key: key, typeName: value.typeName)
            default: throw .unknownField(key: key, offset: value.offset)
            }
        }
    }
}
