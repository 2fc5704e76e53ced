/// What a primitive slot holds.
enum BinaryKind: UInt8, CustomStringConvertible {
    case signed, unsigned, double, float, bool, string, bytes

    var isInteger: Bool { self == .signed || self == .unsigned }

    var description: String {
        switch self {
        case .signed: return "signed integer"
        case .unsigned: return "unsigned integer"
        case .double: return "Double"
        case .float: return "Float"
        case .bool: return "Bool"
        case .string: return "String"
        case .bytes: return "byte string"
        }
    }
}
