/// Splits a command line into words, as bytes.
///
/// Words are separated by spaces or tabs. `"..."` quotes a word that contains spaces; inside quotes
/// `\"`, `\\`, `\n`, `\t`, `\r`, `\0` and `\xNN` (any byte) are escapes. Outside quotes a backslash is an
/// ordinary character.
public enum CachetCLITokenizer {
    /// Splits `line` into words.
    /// - Parameter line: one command line.
    /// - Returns: the words' bytes.
    /// - Throws: ``CachetCLIError`` `syntax` for an unterminated quote or a bad escape.
    public static func tokenize(_ line: String) throws(CachetCLIError) -> [[UInt8]] {
        var words: [[UInt8]] = []
        var current: [UInt8] = []
        var inWord = false
        var bytes = Array(line.utf8)[...]
        while let byte = bytes.popFirst() {
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"), UInt8(ascii: "\n"):
                if inWord {
                    words.append(current)
                    current = []
                    inWord = false
                }
            case UInt8(ascii: "\""):
                inWord = true
                var closed = false
                while let inner = bytes.popFirst() {
                    if inner == UInt8(ascii: "\"") {
                        closed = true
                        break
                    }
                    if inner == UInt8(ascii: "\\") {
                        current.append(try escape(&bytes))
                    } else {
                        current.append(inner)
                    }
                }
                guard closed else {
                    throw CachetCLIError(code: .syntax, message: "unterminated quote: close it with \"")
                }
            default:
                inWord = true
                current.append(byte)
            }
        }
        if inWord { words.append(current) }
        return words
    }

    private static func escape(_ bytes: inout ArraySlice<UInt8>) throws(CachetCLIError) -> UInt8 {
        guard let next = bytes.popFirst() else {
            throw CachetCLIError(code: .syntax, message: "a backslash ends the line inside quotes")
        }
        switch next {
        case UInt8(ascii: "\""): return next
        case UInt8(ascii: "\\"): return next
        case UInt8(ascii: "n"): return 0x0a
        case UInt8(ascii: "t"): return 0x09
        case UInt8(ascii: "r"): return 0x0d
        case UInt8(ascii: "0"): return 0
        case UInt8(ascii: "x"):
            guard bytes.count >= 2, let value = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16)
            else {
                throw CachetCLIError(code: .syntax, message: "\\x needs two hex digits, as in \\x0a")
            }
            bytes.removeFirst(2)
            return value
        default:
            throw CachetCLIError(
                code: .syntax,
                message: "unknown escape \\\(Character(UnicodeScalar(next))) (use \\\" \\\\ \\n \\t \\r \\0 or \\xNN)"
            )
        }
    }
}
