import Foundation

/// One file of `Protocol/vectors/`: a scripted exchange on one connection to an empty node.
///
/// The line format is specified in `Protocol/vectors/README.md`.
public struct ProtocolVector: Sendable, CustomStringConvertible {
    /// A line of the script.
    public enum Step: Sendable, Equatable {
        /// `>`: bytes the client sends.
        case send([UInt8])
        /// `<`: a response frame that must arrive exactly.
        case expect([UInt8])
        /// `<~`: a response whose 8-byte header (after the length) must match while length and body vary.
        case expectHeader([UInt8])
        /// `! close`: the node closes the connection after the preceding replies.
        case close
        /// `! shutdown`: the client half-closes its sending side.
        case shutdown
    }

    /// The file name without `.vector`.
    public var name: String
    /// The script, in order.
    public var steps: [Step]

    /// The name, for test output.
    public var description: String { name }

    /// Every byte the client sends, concatenated.
    public var sentBytes: [UInt8] {
        steps.flatMap { step -> [UInt8] in
            if case .send(let bytes) = step { return bytes }
            return []
        }
    }

    /// The directory of the vectors in this source tree.
    public static var directory: String {
        URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Protocol/vectors").path
    }

    /// Loads every `*.vector` file, sorted by name.
    /// - Returns: the vectors.
    public static func loadAll() -> [ProtocolVector] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".vector") }.sorted().map { name in
            let text = (try? String(contentsOfFile: directory + "/" + name, encoding: .utf8)) ?? ""
            return parse(name: String(name.dropLast(".vector".count)), text: text)
        }
    }

    /// Parses a vector's text; traps on a malformed line, since the files are part of the source tree.
    /// - Parameters:
    ///   - name: the vector's name.
    ///   - text: the file's contents.
    /// - Returns: the vector.
    public static func parse(name: String, text: String) -> ProtocolVector {
        var steps: [Step] = []
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty { continue }
            if trimmed.hasPrefix("<~") {
                steps.append(.expectHeader(hex(trimmed.dropFirst(2), in: name)))
            } else if trimmed.hasPrefix("<") {
                steps.append(.expect(hex(trimmed.dropFirst(1), in: name)))
            } else if trimmed.hasPrefix(">") {
                steps.append(.send(hex(trimmed.dropFirst(1), in: name)))
            } else if trimmed == "! close" {
                steps.append(.close)
            } else if trimmed == "! shutdown" {
                steps.append(.shutdown)
            } else {
                preconditionFailure("\(name).vector: cannot read line '\(rawLine)'")
            }
        }
        return ProtocolVector(name: name, steps: steps)
    }

    private static func hex(_ text: Substring, in name: String) -> [UInt8] {
        let digits = text.filter { !$0.isWhitespace }
        precondition(digits.count % 2 == 0, "\(name).vector: odd number of hex digits")
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            guard let byte = UInt8(digits[index..<next], radix: 16) else {
                preconditionFailure("\(name).vector: '\(digits[index..<next])' is not hex")
            }
            bytes.append(byte)
            index = next
        }
        return bytes
    }
}
