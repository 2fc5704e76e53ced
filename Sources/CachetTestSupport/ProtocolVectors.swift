import CachetIO
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One file of `Protocol/vectors/`: a scripted exchange on one connection to an empty node with default
/// limits.
///
/// The line format is specified in `Protocol/PROTOCOL.md` ("Test vectors") and `Protocol/vectors/README.md`:
///
/// ```
/// # comment                     a '#' anywhere starts a comment that runs to the end of the line
/// > 00000008 01 06 0000 00000001   bytes the client sends (hex; spaces ignored)
/// < 00000008 01 06 0000 00000001   a reply frame that must arrive exactly
/// <~ 01 05 0000 00000003          a reply whose 8 header bytes after the length are exactly these
/// ! shutdown                      the client half-closes its sending side
/// ! close                         the node closes the connection after the replies above
/// ```
///
/// Replay a vector against a live node with ``replay(on:)``, or walk ``steps`` yourself.
public struct ProtocolVector: Sendable, CustomStringConvertible {
    /// A line of the script.
    public enum Step: Sendable, Equatable {
        /// `>`: bytes the client sends. One line may hold several frames or part of one.
        case send([UInt8])
        /// `<`: a reply frame that must arrive exactly, length prefix included.
        case expect([UInt8])
        /// `<~`: a reply whose 8-byte header (after the length) must match while length and body vary.
        case expectHeader([UInt8])
        /// `! close`: the node closes the connection after the preceding replies and sends nothing more.
        case close
        /// `! shutdown`: the client half-closes its sending side (TCP `SHUT_WR`).
        case shutdown
    }

    /// The file name without `.vector`.
    public var name: String
    /// The script, in order.
    public var steps: [Step]

    /// Creates a vector from its steps.
    /// - Parameters:
    ///   - name: the vector's name.
    ///   - steps: the script.
    public init(name: String, steps: [Step]) {
        self.name = name
        self.steps = steps
    }

    /// The name, for test output.
    public var description: String { name }

    /// Every byte the client sends, concatenated in order.
    public var sentBytes: [UInt8] {
        steps.flatMap { step -> [UInt8] in
            if case .send(let bytes) = step { return bytes }
            return []
        }
    }

    /// Whether the node closes the connection at some point of the script.
    public var closes: Bool { steps.contains(.close) }

    /// The replies the script expects, in order, each with whether `! close` comes right after it.
    public var expectedReplies: [ExpectedReply] {
        var replies: [ExpectedReply] = []
        for (index, step) in steps.enumerated() {
            let closesAfter = index + 1 < steps.count && steps[index + 1] == .close
            switch step {
            case .expect(let bytes): replies.append(ExpectedReply(match: .exact(bytes), closesAfter: closesAfter))
            case .expectHeader(let header):
                replies.append(ExpectedReply(match: .header(header), closesAfter: closesAfter))
            default: continue
            }
        }
        return replies
    }

    /// One reply a vector expects.
    public struct ExpectedReply: Sendable, Equatable {
        /// How the reply is matched.
        public enum Match: Sendable, Equatable {
            /// The whole frame, byte for byte.
            case exact([UInt8])
            /// The 8 header bytes after the length prefix; the length and body vary.
            case header([UInt8])
        }

        /// How the reply is matched.
        public var match: Match
        /// Whether the node closes the connection right after this reply (`! close` is the next line).
        public var closesAfter: Bool

        /// Creates an expectation.
        /// - Parameters:
        ///   - match: how the reply is matched.
        ///   - closesAfter: whether the node closes the connection right after it.
        public init(match: Match, closesAfter: Bool) {
            self.match = match
            self.closesAfter = closesAfter
        }

        /// The expected header bytes (version, opcode, status, id), whichever the match.
        public var header: [UInt8] {
            switch match {
            case .exact(let bytes): return Array(bytes.dropFirst(4).prefix(8))
            case .header(let header): return header
            }
        }

        /// Checks a whole reply frame (length prefix included) against this expectation.
        ///
        /// A `<~` reply must carry its declared length and these header bytes; when the header is an OK
        /// reply to STATS, the body must also be a JSON object with ``ProtocolVector/requiredStatsFields``.
        ///
        /// - Parameter frame: the reply's bytes.
        /// - Returns: `nil` when the reply matches, otherwise what differs.
        public func problem(with frame: [UInt8]) -> String? {
            switch match {
            case .exact(let bytes):
                return frame == bytes ? nil : "expected \(ProtocolVector.hex(bytes)), got \(ProtocolVector.hex(frame))"
            case .header(let header):
                guard frame.count >= 12 else { return "reply of \(frame.count) bytes is shorter than a header" }
                let length = frame.prefix(4).reduce(0) { $0 << 8 | Int($1) }
                guard length == frame.count - 4 else {
                    return "reply declares \(length) payload bytes but carries \(frame.count - 4)"
                }
                let actual = Array(frame[4..<12])
                guard actual == header else {
                    return "expected header \(ProtocolVector.hex(header)), got \(ProtocolVector.hex(actual))"
                }
                if header[1] == 0x05 && header[2] == 0 && header[3] == 0 {
                    return ProtocolVector.statsProblem(in: Array(frame[12...]))
                }
                return nil
            }
        }
    }

    // MARK: - STATS

    /// The fields every STATS reply carries (`Protocol/PROTOCOL.md`, "STATS").
    public static let requiredStatsFields = [
        "items", "memory_bytes", "memory_limit", "gets", "hits", "misses", "puts", "deletes", "evictions",
        "expired", "connections_current", "connections_total", "uptime_seconds", "version",
    ]

    /// The fields a STATS reply carries in addition when the node has a disk tier.
    public static let requiredDiskStatsFields = [
        "disk_items", "disk_bytes", "disk_logical_bytes", "disk_limit", "disk_hits", "disk_errors", "disk_corrupt",
        "compression_ratio", "disk_queue_depth",
    ]

    /// Checks a STATS reply body: a UTF-8 JSON object with the required fields, `version` a string and
    /// every other required field a number.
    ///
    /// - Parameters:
    ///   - body: the reply body.
    ///   - diskTier: whether to require ``requiredDiskStatsFields`` too.
    /// - Returns: `nil` when the body is acceptable, otherwise what is wrong with it.
    public static func statsProblem(in body: [UInt8], diskTier: Bool = false) -> String? {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] else {
            return "STATS body is not a JSON object: \(String(decoding: body, as: UTF8.self))"
        }
        let required = requiredStatsFields + (diskTier ? requiredDiskStatsFields : [])
        let missing = required.filter { object[$0] == nil }
        if !missing.isEmpty { return "STATS body lacks \(missing.joined(separator: ", "))" }
        if !(object["version"] is String) { return "STATS field version is not a string" }
        for field in required where field != "version" {
            if object[field] is String || object[field] is [Any] || object[field] is [String: Any]
                || object[field] is NSNull
            {
                return "STATS field \(field) is not a number"
            }
        }
        return nil
    }

    // MARK: - Loading

    /// The directory of the vectors in this source tree, found from this file's path.
    public static var directory: String {
        URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Protocol/vectors").path
    }

    /// Loads every `*.vector` file of ``directory``, sorted by name.
    ///
    /// The files are part of the source tree, so an unreadable or malformed one stops the test process
    /// with its name and line; ``load(directory:)`` reports the same as a thrown error.
    /// - Returns: the vectors.
    public static func loadAll() -> [ProtocolVector] {
        do {
            return try load(directory: directory)
        } catch {
            preconditionFailure("\(error)")
        }
    }

    /// Loads every `*.vector` file of a directory, sorted by name.
    /// - Parameter directory: the directory.
    /// - Returns: the vectors.
    /// - Throws: ``ProtocolVectorError`` when the directory or a file cannot be read or parsed.
    public static func load(directory: String) throws(ProtocolVectorError) -> [ProtocolVector] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw ProtocolVectorError(file: directory, line: 0, message: "cannot list the directory: \(error)")
        }
        var vectors: [ProtocolVector] = []
        for name in names.sorted() where name.hasSuffix(".vector") {
            let text: String
            do {
                text = try String(contentsOfFile: directory + "/" + name, encoding: .utf8)
            } catch {
                throw ProtocolVectorError(file: name, line: 0, message: "cannot read the file: \(error)")
            }
            vectors.append(try parse(name: String(name.dropLast(".vector".count)), text: text))
        }
        return vectors
    }

    /// Parses a vector's text.
    /// - Parameters:
    ///   - name: the vector's name (the file name without `.vector`).
    ///   - text: the file's contents.
    /// - Returns: the vector.
    /// - Throws: ``ProtocolVectorError`` naming the line that cannot be read: an unknown marker, an odd
    ///   number of hex digits, a character that is not hex, an empty `>`/`<` line, or a `<~` line that is
    ///   not 8 bytes.
    public static func parse(name: String, text: String) throws(ProtocolVectorError) -> ProtocolVector {
        var steps: [Step] = []
        for (index, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let lineNumber = index + 1
            func fail(_ message: String) -> ProtocolVectorError {
                ProtocolVectorError(file: name + ".vector", line: lineNumber, message: message)
            }
            let content = rawLine.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let line = content.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty { continue }
            if line.hasPrefix("!") {
                switch line.dropFirst().trimmingCharacters(in: .whitespaces) {
                case "close": steps.append(.close)
                case "shutdown": steps.append(.shutdown)
                default: throw fail("unknown action '\(line)'; expected '! close' or '! shutdown'")
                }
                continue
            }
            let marker: Substring
            if line.hasPrefix("<~") {
                marker = "<~"
            } else if line.hasPrefix("<") || line.hasPrefix(">") {
                marker = line.prefix(1)
            } else {
                throw fail("cannot read '\(line)'; lines start with >, <, <~, ! or #")
            }
            let bytes = try hexBytes(line.dropFirst(marker.count), fail: fail)
            guard !bytes.isEmpty else { throw fail("'\(marker)' line without bytes") }
            switch marker {
            case "<~":
                // The header after the length: version, opcode, status, id.
                guard bytes.count == 8 else {
                    throw fail("a '<~' line holds the 8 header bytes after the length, got \(bytes.count)")
                }
                steps.append(.expectHeader(bytes))
            case "<": steps.append(.expect(bytes))
            default: steps.append(.send(bytes))
            }
        }
        return ProtocolVector(name: name, steps: steps)
    }

    private static func hexBytes(
        _ text: Substring,
        fail: (String) -> ProtocolVectorError
    ) throws(ProtocolVectorError) -> [UInt8] {
        let digits = text.unicodeScalars.filter { !CharacterSet.whitespaces.contains($0) }.map(Character.init)
        guard digits.count % 2 == 0 else { throw fail("odd number of hex digits") }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for pair in stride(from: 0, to: digits.count, by: 2) {
            let text = String(digits[pair..<pair + 2])
            guard text.allSatisfy(\.isHexDigit), let byte = UInt8(text, radix: 16) else {
                throw fail("'\(text)' is not a hex byte")
            }
            bytes.append(byte)
        }
        return bytes
    }

    /// Bytes as lower-case hex without separators, for messages.
    /// - Parameter bytes: the bytes.
    /// - Returns: two hex digits per byte; long inputs are shortened in the middle.
    public static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        func render(_ slice: ArraySlice<UInt8>) -> String {
            String(slice.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0f)]] })
        }
        guard bytes.count > 96 else { return render(bytes[...]) }
        return render(bytes.prefix(48)) + "...(\(bytes.count) bytes)..." + render(bytes.suffix(16))
    }

    // MARK: - Replaying

    /// Plays the script over a connection to a node that was started empty with default limits.
    ///
    /// Steps run in order: `>` sends its bytes; `<` reads exactly that many bytes and compares them;
    /// `<~` reads a 4-byte length and that many payload bytes and checks them with
    /// ``ExpectedReply/problem(with:)``; `! shutdown` half-closes the sending side; `! close` waits for
    /// the node to close the connection.
    ///
    /// - Parameter connection: a fresh connection to the node.
    /// - Throws: ``ProtocolVectorMismatch`` at the first reply that differs or a close that does not
    ///   come; whatever the connection throws when sending or reading fails.
    public func replay(on connection: some ProtocolVectorConnection) throws {
        var replyIndex = 0
        for step in steps {
            switch step {
            case .send(let bytes):
                try connection.send(bytes)
            case .expect(let bytes):
                let received = try connection.readBytes(bytes.count)
                if received != bytes {
                    throw ProtocolVectorMismatch(
                        vector: name,
                        reply: replyIndex,
                        message: "expected \(Self.hex(bytes)), got \(Self.hex(received))"
                    )
                }
                replyIndex += 1
            case .expectHeader(let header):
                let prefix = try connection.readBytes(4)
                let length = prefix.reduce(0) { $0 << 8 | Int($1) }
                let frame = prefix + (try connection.readBytes(length))
                if let problem = ExpectedReply(match: .header(header), closesAfter: false).problem(with: frame) {
                    throw ProtocolVectorMismatch(vector: name, reply: replyIndex, message: problem)
                }
                replyIndex += 1
            case .shutdown:
                try connection.shutdownSending()
            case .close:
                if !connection.waitForClose() {
                    throw ProtocolVectorMismatch(
                        vector: name,
                        reply: replyIndex,
                        message: "the node did not close the connection after reply \(replyIndex)"
                    )
                }
            }
        }
    }
}

/// A line of a vector file that cannot be read.
public struct ProtocolVectorError: Error, Sendable, CustomStringConvertible {
    /// The file (or directory) concerned.
    public var file: String
    /// The 1-based line number, 0 when the whole file is concerned.
    public var line: Int
    /// What is wrong.
    public var message: String

    /// `file:line: message`.
    public var description: String { "\(file):\(line): \(message)" }
}

/// A reply that differs from what a vector expects.
public struct ProtocolVectorMismatch: Error, Sendable, CustomStringConvertible {
    /// The vector's name.
    public var vector: String
    /// The 0-based index of the reply concerned among the vector's replies.
    public var reply: Int
    /// What differs.
    public var message: String

    /// `vector, reply N: message`.
    public var description: String { "\(vector).vector, reply \(reply): \(message)" }
}

/// A client connection a vector can be replayed over (a socket in node tests, an in-memory node in codec
/// tests).
public protocol ProtocolVectorConnection {
    /// Sends every byte.
    /// - Parameter bytes: what to send.
    /// - Throws: when the peer is gone.
    func send(_ bytes: [UInt8]) throws
    /// Reads exactly `count` bytes.
    /// - Parameter count: bytes to read.
    /// - Returns: the bytes.
    /// - Throws: on timeout or when the peer closes first.
    func readBytes(_ count: Int) throws -> [UInt8]
    /// Half-closes the sending side: the node sees end of stream after the bytes already sent.
    /// - Throws: when the connection is unusable.
    func shutdownSending() throws
    /// Waits for the peer to close the connection.
    /// - Returns: true when it closed; false on timeout (or, where the transport can tell, when more
    ///   bytes arrived first).
    func waitForClose() -> Bool
}

extension TestSocket: ProtocolVectorConnection {
    /// Half-closes the socket's sending side (`shutdown(fd, SHUT_WR)`, through CachetIO).
    /// - Throws: ``TestSocketError`` when the call fails.
    public func shutdownSending() throws {
        let code = CachetSocket.shutdownOutput(fd)
        if code != 0 {
            throw TestSocketError(description: "shutdown: errno \(code)")
        }
    }
}
