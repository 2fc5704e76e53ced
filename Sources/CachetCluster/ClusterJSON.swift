/// A JSON value (RFC 8259) with the byte offset where it starts, for messages that point at the spot.
///
/// The cluster file is small and read rarely, so this parser favours exact errors over speed: it reports
/// the line and column of a syntax error, keeps object fields in file order, refuses a field given twice
/// (which a general-purpose decoder silently resolves), and tells integers from fractions, so that
/// `"port": 7420.5` is an error rather than a rounded port.
struct ClusterJSON {
    enum Value {
        case object([(key: String, value: ClusterJSON)])
        case array([ClusterJSON])
        case string(String)
        /// A number without fraction or exponent that fits an `Int`.
        case integer(Int)
        /// Any other number, kept as written.
        case number(String)
        case bool(Bool)
        case null
    }

    var value: Value
    /// Where the value starts: a byte offset into the document.
    var offset: Int

    /// The JSON type's name, for messages.
    var typeName: String {
        switch value {
        case .object: return "an object"
        case .array: return "an array"
        case .string: return "a string"
        case .integer, .number: return "a number"
        case .bool: return "a boolean"
        case .null: return "null"
        }
    }

    /// A syntax error at a byte offset.
    struct SyntaxError: Error {
        var offset: Int
        var reason: String
    }

    /// The deepest nesting accepted; a cluster file needs three levels.
    static let maximumDepth = 64

    /// Parses a whole document: one value, surrounded by optional whitespace, after an optional UTF-8
    /// byte order mark.
    /// - Parameter bytes: the document.
    /// - Returns: the value.
    /// - Throws: ``SyntaxError`` at the first byte that is not JSON.
    static func parse(_ bytes: [UInt8]) throws(SyntaxError) -> ClusterJSON {
        var parser = Parser(bytes: bytes)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { parser.position = 3 }
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.position == bytes.count else {
            throw SyntaxError(offset: parser.position, reason: "unexpected data after the JSON value")
        }
        return value
    }

    /// The 1-based line and column (in bytes) of `offset` in `bytes`.
    static func lineAndColumn(of offset: Int, in bytes: [UInt8]) -> (line: Int, column: Int) {
        var line = 1
        var lineStart = 0
        for index in 0..<min(offset, bytes.count) where bytes[index] == UInt8(ascii: "\n") {
            line += 1
            lineStart = index + 1
        }
        return (line, offset - lineStart + 1)
    }

    private struct Parser {
        let bytes: [UInt8]
        var position = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        var current: UInt8? { position < bytes.count ? bytes[position] : nil }

        mutating func skipWhitespace() {
            while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D {
                position += 1
            }
        }

        func fail(_ reason: String, at offset: Int? = nil) -> SyntaxError {
            SyntaxError(offset: offset ?? position, reason: reason)
        }

        func unexpected(_ expected: String) -> SyntaxError {
            guard let byte = current else { return fail("the document ends where \(expected) was expected") }
            let shown =
                byte >= 0x20 && byte < 0x7F
                ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
            return fail("\(shown) where \(expected) was expected")
        }

        mutating func value(depth: Int) throws(SyntaxError) -> ClusterJSON {
            let start = position
            guard let byte = current else { throw unexpected("a value") }
            switch byte {
            case UInt8(ascii: "{"):
                guard depth < ClusterJSON.maximumDepth else { throw fail("nesting deeper than 64 levels") }
                return ClusterJSON(value: .object(try object(depth: depth + 1)), offset: start)
            case UInt8(ascii: "["):
                guard depth < ClusterJSON.maximumDepth else { throw fail("nesting deeper than 64 levels") }
                return ClusterJSON(value: .array(try array(depth: depth + 1)), offset: start)
            case UInt8(ascii: "\""):
                return ClusterJSON(value: .string(try string()), offset: start)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return ClusterJSON(value: try number(), offset: start)
            case UInt8(ascii: "t"):
                try literal("true")
                return ClusterJSON(value: .bool(true), offset: start)
            case UInt8(ascii: "f"):
                try literal("false")
                return ClusterJSON(value: .bool(false), offset: start)
            case UInt8(ascii: "n"):
                try literal("null")
                return ClusterJSON(value: .null, offset: start)
            default:
                throw unexpected("a value")
            }
        }

        mutating func literal(_ word: String) throws(SyntaxError) {
            for expected in word.utf8 {
                guard current == expected else { throw unexpected("'\(word)'") }
                position += 1
            }
        }

        mutating func object(depth: Int) throws(SyntaxError) -> [(key: String, value: ClusterJSON)] {
            position += 1  // {
            var fields: [(key: String, value: ClusterJSON)] = []
            skipWhitespace()
            if current == UInt8(ascii: "}") {
                position += 1
                return fields
            }
            while true {
                skipWhitespace()
                let keyOffset = position
                guard current == UInt8(ascii: "\"") else { throw unexpected("a field name in double quotes") }
                let key = try string()
                if fields.contains(where: { $0.key.utf8.elementsEqual(key.utf8) }) {
                    throw fail("the field \"\(key)\" appears twice in one object", at: keyOffset)
                }
                skipWhitespace()
                guard current == UInt8(ascii: ":") else { throw unexpected("':'") }
                position += 1
                skipWhitespace()
                fields.append((key, try value(depth: depth)))
                skipWhitespace()
                if current == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                guard current == UInt8(ascii: "}") else { throw unexpected("',' or '}'") }
                position += 1
                return fields
            }
        }

        mutating func array(depth: Int) throws(SyntaxError) -> [ClusterJSON] {
            position += 1  // [
            var elements: [ClusterJSON] = []
            skipWhitespace()
            if current == UInt8(ascii: "]") {
                position += 1
                return elements
            }
            while true {
                skipWhitespace()
                elements.append(try value(depth: depth))
                skipWhitespace()
                if current == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                guard current == UInt8(ascii: "]") else { throw unexpected("',' or ']'") }
                position += 1
                return elements
            }
        }

        mutating func string() throws(SyntaxError) -> String {
            let start = position
            position += 1  // "
            var scalars = String.UnicodeScalarView()
            var runStart = position
            func flushRun(_ end: Int) throws(SyntaxError) {
                guard runStart < end else { return }
                guard let text = String(validating: bytes[runStart..<end], as: UTF8.self) else {
                    throw SyntaxError(offset: runStart, reason: "a string that is not valid UTF-8")
                }
                scalars.append(contentsOf: text.unicodeScalars)
            }
            while true {
                guard let byte = current else { throw fail("a string that never ends", at: start) }
                if byte == UInt8(ascii: "\"") {
                    try flushRun(position)
                    position += 1
                    return String(scalars)
                }
                if byte < 0x20 { throw fail("a control character (0x\(String(byte, radix: 16))) inside a string") }
                if byte != UInt8(ascii: "\\") {
                    position += 1
                    continue
                }
                try flushRun(position)
                position += 1
                guard let escape = current else { throw fail("a string that never ends", at: start) }
                position += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append("\"")
                case UInt8(ascii: "\\"): scalars.append("\\")
                case UInt8(ascii: "/"): scalars.append("/")
                case UInt8(ascii: "b"): scalars.append("\u{08}")
                case UInt8(ascii: "f"): scalars.append("\u{0C}")
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "u"):
                    let escapeStart = position - 2
                    var code = try hex4()
                    if (0xD800...0xDBFF).contains(code) {
                        guard current == UInt8(ascii: "\\"), position + 1 < bytes.count,
                            bytes[position + 1] == UInt8(ascii: "u")
                        else { throw fail("a lone UTF-16 high surrogate \\u escape", at: escapeStart) }
                        position += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else {
                            throw fail("a UTF-16 high surrogate not followed by a low one", at: escapeStart)
                        }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(code) {
                        throw fail("a lone UTF-16 low surrogate \\u escape", at: escapeStart)
                    }
                    scalars.append(Unicode.Scalar(code)!)
                default:
                    throw fail(
                        "an unknown escape '\\\(Character(Unicode.Scalar(escape)))' in a string",
                        at: position - 2
                    )
                }
                runStart = position
            }
        }

        mutating func hex4() throws(SyntaxError) -> UInt32 {
            var code: UInt32 = 0
            for _ in 0..<4 {
                guard let byte = current else { throw unexpected("a hex digit") }
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw unexpected("a hex digit")
                }
                code = code << 4 | digit
                position += 1
            }
            return code
        }

        mutating func digits() -> Int {
            let start = position
            while let byte = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { position += 1 }
            return position - start
        }

        mutating func number() throws(SyntaxError) -> Value {
            let start = position
            if current == UInt8(ascii: "-") { position += 1 }
            let integerStart = position
            let integerDigits = digits()
            guard integerDigits > 0 else { throw unexpected("a digit") }
            if integerDigits > 1 && bytes[integerStart] == UInt8(ascii: "0") {
                throw fail("a number with a leading zero", at: start)
            }
            var integral = true
            if current == UInt8(ascii: ".") {
                position += 1
                guard digits() > 0 else { throw unexpected("a digit after the decimal point") }
                integral = false
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                position += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { position += 1 }
                guard digits() > 0 else { throw unexpected("a digit in the exponent") }
                integral = false
            }
            let text = String(decoding: bytes[start..<position], as: UTF8.self)
            if integral, let value = Int(text) { return .integer(value) }
            return .number(text)
        }
    }
}
