import CachetWire

/// The command a request's duration is counted under in ``RequestLatencies`` (memcached_exporter's names
/// for the command label).
enum LatencyCommand: Int, CaseIterable {
    case get
    case set
    case delete
    /// CLEAR, STATS, PING, AUTH, and requests refused before their command was known.
    case other

    init(_ opcode: CachetOpcode) {
        switch opcode {
        case .get: self = .get
        case .put: self = .set
        case .delete: self = .delete
        default: self = .other
        }
    }

    /// The `command` label.
    var label: String {
        switch self {
        case .get: return "get"
        case .set: return "set"
        case .delete: return "delete"
        case .other: return "other"
        }
    }
}
