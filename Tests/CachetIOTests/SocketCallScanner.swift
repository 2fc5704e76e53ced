/// Finds calls of the C socket functions (and of epoll, poll and name resolution) in Swift source, for
/// ``CachetIOBoundaryTests``: CachetIO is the one module that makes them.
///
/// A call is the function's name followed by `(`, either qualified as `Glibc.name(`, or unqualified with
/// the C function's number of arguments and no argument labels. That leaves out the project's own
/// methods of the same names, which are called on a value (`connection.send(bytes)`), declared
/// (`func send(`, `case send(`), or take labels or another number of arguments (`send(on: node, ...)`,
/// `try connect(host, port)`): inside a type with a method of the same name, Swift would not even find the
/// C function unqualified. Comments and the text of string literals are not code, and are skipped.
struct SocketCallScanner {
    /// The C functions and their numbers of arguments.
    static let functions: [String: Int] = [
        "socket": 3, "socketpair": 4, "connect": 3, "accept": 3, "accept4": 4, "bind": 3, "listen": 2,
        "setsockopt": 5, "getsockopt": 5, "getsockname": 3, "getpeername": 3, "shutdown": 2,
        "send": 4, "sendto": 6, "sendmsg": 3, "sendmmsg": 4, "recv": 4, "recvfrom": 6, "recvmsg": 3, "recvmmsg": 5,
        "writev": 3, "readv": 3, "poll": 3, "ppoll": 4, "select": 5, "pselect": 6,
        "getaddrinfo": 4, "freeaddrinfo": 1, "getnameinfo": 7,
        "epoll_create": 1, "epoll_create1": 1, "epoll_ctl": 4, "epoll_wait": 4, "epoll_pwait": 5, "epoll_pwait2": 5,
    ]

    /// One call found.
    struct Call: Hashable, CustomStringConvertible {
        /// The function called.
        var name: String
        /// The line it is on, from 1.
        var line: Int

        var description: String { "\(name)( on line \(line)" }
    }

    /// The calls of the C functions in `source`.
    /// - Parameter source: Swift source text.
    /// - Returns: the calls, in order.
    static func calls(in source: String) -> [Call] {
        let code = blankingCommentsAndStrings(Array(source.utf8))
        var calls: [Call] = []
        var line = 1
        var index = 0
        while index < code.count {
            let byte = code[index]
            if byte == UInt8(ascii: "\n") { line += 1 }
            guard isIdentifierStart(byte), index == 0 || !isIdentifierByte(code[index - 1]) else {
                index += 1
                continue
            }
            var end = index
            while end < code.count && isIdentifierByte(code[end]) { end += 1 }
            let name = String(decoding: code[index..<end], as: UTF8.self)
            defer { index = end }
            guard let arity = functions[name], let open = nextNonSpace(code, from: end), code[open] == UInt8(ascii: "(")
            else { continue }
            switch wordBefore(code, at: index) {
            case ".Glibc"?:
                calls.append(Call(name: name, line: line))
            case let word? where word.hasPrefix(".") || word == "func" || word == "case":
                continue
            default:
                let (count, labelled) = arguments(code, open: open)
                if count == arity && !labelled { calls.append(Call(name: name, line: line)) }
            }
        }
        return calls
    }

    /// `code` with comments (nested block comments too) and the text of string literals replaced by spaces,
    /// line ends kept, so that offsets and line numbers stay those of the source.
    static func blankingCommentsAndStrings(_ source: [UInt8]) -> [UInt8] {
        var code = source
        var index = 0
        func blank(_ range: Range<Int>) {
            for position in range where code[position] != UInt8(ascii: "\n") { code[position] = UInt8(ascii: " ") }
        }
        func starts(_ text: String, at position: Int) -> Bool {
            let bytes = Array(text.utf8)
            return position + bytes.count <= source.count && Array(source[position..<(position + bytes.count)]) == bytes
        }
        while index < source.count {
            if starts("//", at: index) {
                var end = index
                while end < source.count && source[end] != UInt8(ascii: "\n") { end += 1 }
                blank(index..<end)
                index = end
            } else if starts("/*", at: index) {
                var depth = 0
                var end = index
                repeat {
                    if starts("/*", at: end) {
                        depth += 1
                        end += 2
                    } else if starts("*/", at: end) {
                        depth -= 1
                        end += 2
                    } else {
                        end += 1
                    }
                } while depth > 0 && end < source.count
                blank(index..<min(end, source.count))
                index = end
            } else if source[index] == UInt8(ascii: "\"") {
                let delimiter = starts("\"\"\"", at: index) ? "\"\"\"" : "\""
                var end = index + delimiter.utf8.count
                while end < source.count && !starts(delimiter, at: end) {
                    end += source[end] == UInt8(ascii: "\\") ? 2 : 1
                }
                blank((index + 1)..<min(end, source.count))
                index = end + delimiter.utf8.count
            } else {
                index += 1
            }
        }
        return code
    }

    /// The number of arguments of the call whose `(` is at `open`, and whether any is labelled.
    static func arguments(_ code: [UInt8], open: Int) -> (count: Int, labelled: Bool) {
        var depth = 0
        var arguments: [[UInt8]] = [[]]
        for byte in code[(open + 1)...] {
            switch byte {
            case UInt8(ascii: "("), UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
            case UInt8(ascii: ")") where depth == 0:
                let written = arguments.filter { !$0.allSatisfy(isSpace) }
                return (written.count, written.contains(where: isLabelled))
            case UInt8(ascii: ")"), UInt8(ascii: "]"), UInt8(ascii: "}"):
                depth -= 1
            case UInt8(ascii: ",") where depth == 0:
                arguments.append([])
                continue
            default:
                break
            }
            arguments[arguments.count - 1].append(byte)
        }
        return (0, false)
    }

    /// Whether an argument starts with a label (`name:`, not `name::` nor a ternary's `? x :`).
    private static func isLabelled(_ argument: [UInt8]) -> Bool {
        guard let start = argument.firstIndex(where: { !isSpace($0) }), isIdentifierStart(argument[start]) else {
            return false
        }
        var end = start
        while end < argument.count && isIdentifierByte(argument[end]) { end += 1 }
        while end < argument.count && isSpace(argument[end]) { end += 1 }
        return end < argument.count && argument[end] == UInt8(ascii: ":")
            && (end + 1 == argument.count || argument[end + 1] != UInt8(ascii: ":"))
    }

    /// The word before `position` (skipping spaces): `.Name` when the name is reached through a dot
    /// (`Glibc.send`, `connection.send`), or a bare word (`func`); nil when none.
    private static func wordBefore(_ code: [UInt8], at position: Int) -> String? {
        var end = position
        while end > 0 && isSpace(code[end - 1]) { end -= 1 }
        guard end > 0 else { return nil }
        if code[end - 1] == UInt8(ascii: ".") {
            var start = end - 1
            while start > 0 && isSpace(code[start - 1]) { start -= 1 }
            let wordEnd = start
            while start > 0 && isIdentifierByte(code[start - 1]) { start -= 1 }
            return "." + String(decoding: code[start..<wordEnd], as: UTF8.self)
        }
        var start = end
        while start > 0 && isIdentifierByte(code[start - 1]) { start -= 1 }
        return start < end ? String(decoding: code[start..<end], as: UTF8.self) : nil
    }

    private static func nextNonSpace(_ code: [UInt8], from position: Int) -> Int? {
        var index = position
        while index < code.count && isSpace(code[index]) { index += 1 }
        return index < code.count ? index : nil
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\t")
            || byte == UInt8(ascii: "\r")
    }

    private static func isIdentifierStart(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || byte == UInt8(ascii: "_")
    }

    private static func isIdentifierByte(_ byte: UInt8) -> Bool {
        isIdentifierStart(byte) || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
    }
}
