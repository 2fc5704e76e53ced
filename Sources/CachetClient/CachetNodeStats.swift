/// One node's STATS: its counters by field name, and the JSON they came from.
///
/// Fields are read by name (see `Protocol/PROTOCOL.md`, "STATS"); a field a later node adds is kept too.
public struct CachetNodeStats: Sendable, Hashable {
    /// A field's value.
    public enum Value: Sendable, Hashable {
        /// A JSON integer.
        case integer(Int64)
        /// A JSON number with a fraction or an exponent.
        case number(Double)
        /// A JSON string.
        case string(String)
        /// A JSON boolean.
        case bool(Bool)
        /// `null`, or a nested value this reader does not unpack.
        case other
    }

    /// The node's id.
    public var node: String
    /// Every field of the reply.
    public var fields: [String: Value]
    /// The reply as received.
    public var json: String

    /// Reads a STATS reply body.
    /// - Parameters:
    ///   - node: the node's id.
    ///   - json: the reply body.
    /// - Returns: nil when the body is not a flat JSON object.
    public init?(node: String, json: [UInt8]) {
        var reader = FlatJSONReader(json)
        guard let fields = reader.readObject() else { return nil }
        self.node = node
        self.fields = fields
        self.json = String(decoding: json, as: UTF8.self)
    }

    /// The integer field `name`, or nil when absent or not an integer.
    public subscript(integer name: String) -> Int64? {
        if case .integer(let value)? = fields[name] { return value }
        return nil
    }

    /// Live entries in the memory tier (`items`).
    public var items: Int64? { self[integer: "items"] }
    /// GET requests answered (`gets`).
    public var gets: Int64? { self[integer: "gets"] }
    /// GETs that found a value (`hits`).
    public var hits: Int64? { self[integer: "hits"] }
    /// PUT requests answered (`puts`).
    public var puts: Int64? { self[integer: "puts"] }
    /// The node's software version (`version`).
    public var version: String? {
        if case .string(let value)? = fields["version"] { return value }
        return nil
    }
}

/// Reads one JSON object of scalar values (the shape of a STATS reply); nested values are skipped.
struct FlatJSONReader {
    private let bytes: [UInt8]
    private var index = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func readObject() -> [String: CachetNodeStats.Value]? {
        skipSpace()
        guard take(UInt8(ascii: "{")) else { return nil }
        var fields: [String: CachetNodeStats.Value] = [:]
        skipSpace()
        if take(UInt8(ascii: "}")) { return finish(fields) }
        while true {
            skipSpace()
            guard let name = readString() else { return nil }
            skipSpace()
            guard take(UInt8(ascii: ":")) else { return nil }
            skipSpace()
            guard let value = readValue() else { return nil }
            fields[name] = value
            skipSpace()
            if take(UInt8(ascii: ",")) { continue }
            guard take(UInt8(ascii: "}")) else { return nil }
            return finish(fields)
        }
    }

    private mutating func finish(_ fields: [String: CachetNodeStats.Value]) -> [String: CachetNodeStats.Value]? {
        skipSpace()
        return index == bytes.count ? fields : nil
    }

    private mutating func readValue() -> CachetNodeStats.Value? {
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "\""):
            return readString().map { .string($0) }
        case UInt8(ascii: "t"):
            return literal("true") ? .bool(true) : nil
        case UInt8(ascii: "f"):
            return literal("false") ? .bool(false) : nil
        case UInt8(ascii: "n"):
            return literal("null") ? .other : nil
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            return skipNested() ? .other : nil
        default:
            return readNumber()
        }
    }

    private mutating func readNumber() -> CachetNodeStats.Value? {
        let start = index
        var integral = true
        while index < bytes.count {
            let byte = bytes[index]
            if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") || byte == UInt8(ascii: "-") {
                index += 1
            } else if byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E")
                || byte == UInt8(ascii: "+")
            {
                integral = false
                index += 1
            } else {
                break
            }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if integral, let value = Int64(text) { return .integer(value) }
        return Double(text).map { .number($0) }
    }

    private mutating func readString() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        var scalars: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "\"") { return String(decoding: scalars, as: UTF8.self) }
            if byte == UInt8(ascii: "\\") {
                guard index < bytes.count else { return nil }
                let escaped = bytes[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "n"): scalars.append(0x0a)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "r"): scalars.append(0x0d)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0c)
                case UInt8(ascii: "u"):
                    guard index + 4 <= bytes.count,
                        let code = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16)
                    else { return nil }
                    index += 4
                    scalars.append(contentsOf: Array(String(Unicode.Scalar(code) ?? "\u{fffd}").utf8))
                default: scalars.append(escaped)
                }
            } else {
                scalars.append(byte)
            }
        }
        return nil
    }

    private mutating func skipNested() -> Bool {
        var depth = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                guard readString() != nil else { return false }
                continue
            }
            index += 1
            if byte == UInt8(ascii: "{") || byte == UInt8(ascii: "[") { depth += 1 }
            if byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]") {
                depth -= 1
                if depth == 0 { return true }
            }
        }
        return false
    }

    private mutating func literal(_ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard index + count <= bytes.count else { return false }
        for offset in 0..<count where bytes[index + offset] != text.utf8Start[offset] { return false }
        index += count
        return true
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    private mutating func skipSpace() {
        while index < bytes.count, [0x20, 0x09, 0x0a, 0x0d].contains(bytes[index]) { index += 1 }
    }
}
