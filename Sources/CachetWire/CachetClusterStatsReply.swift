/// The body of an OK reply to a cluster-wide STATS (``CachetRequestFlags/cluster``): one UTF-8 JSON
/// object with the totals and each member's own STATS object or error. Layout in
/// `Protocol/PROTOCOL.md`, "Cluster-wide CLEAR and STATS"; on the wire it is one line:
///
/// ```
/// {"cluster":true,"answered_by":"n1","cluster_hash":"b16d03ee9c093d78","members_total":3,"members_ok":2,
///  "totals":{"items":5,...},
///  "members":[{"id":"n1","status":"ok","stats":{...}},{"id":"n3","status":"unavailable","error":"..."}]}
/// ```
///
/// A single node's STATS object never has a `members` field, so a client tells the two apart by it.
public struct CachetClusterStatsReply: Hashable, Sendable {
    /// One member's outcome.
    public struct Member: Hashable, Sendable {
        /// The member's id.
        public var id: String
        /// The status the member answered; UNAVAILABLE when it was marked down, refused, or missed the
        /// deadline.
        public var status: CachetStatus
        /// The member's STATS JSON object when `status` is OK; otherwise the error message (UTF-8).
        public var body: [UInt8]

        /// Creates a member's outcome.
        /// - Parameters:
        ///   - id: the member's id.
        ///   - status: its reply's status.
        ///   - body: its STATS JSON on OK, else the error message.
        public init(id: String, status: CachetStatus, body: [UInt8]) {
            self.id = id
            self.status = status
            self.body = body
        }
    }

    /// The integer STATS fields summed into `totals`, in the order they are written.
    public static let totalFields: [String] = [
        "items", "memory_bytes", "memory_limit", "gets", "hits", "misses", "puts", "deletes", "evictions",
        "expired", "connections_current", "disk_items", "disk_bytes",
    ]

    /// The id of the node that fanned out.
    public var answeredBy: String
    /// That node's membership hash, 16 lowercase hex digits.
    public var clusterHash: String
    /// Every member, in ring order (ascending id bytes).
    public var members: [Member]

    /// Creates a reply.
    /// - Parameters:
    ///   - answeredBy: the id of the node that fanned out.
    ///   - clusterHash: its membership hash as 16 lowercase hex digits.
    ///   - members: each member's outcome, in ring order.
    public init(answeredBy: String, clusterHash: String, members: [Member]) {
        self.answeredBy = answeredBy
        self.clusterHash = clusterHash
        self.members = members
    }

    /// The status's name in the reply: the specification's name in lower case (`ok`, `unavailable`,
    /// `status_9`).
    /// - Parameter status: a status.
    /// - Returns: its name.
    public static func statusName(_ status: CachetStatus) -> String { status.description.lowercased() }

    /// The reply body. An OK member whose body is not one JSON object is written as `server_error` with
    /// the error `malformed STATS reply` and is not counted.
    ///
    /// - Complexity: O(n) in the members' bodies.
    public var encoded: [UInt8] {
        var totals = [UInt64](repeating: 0, count: Self.totalFields.count)
        var entries: [[UInt8]] = []
        var okCount = 0
        for member in members {
            var entry: [UInt8] = Array("{\"id\":".utf8)
            CachetJSONText.appendString(member.id, to: &entry)
            if member.status == .ok, let object = CachetJSONText.scanObject(member.body, integers: Self.totalFields) {
                okCount += 1
                for index in totals.indices {
                    totals[index] = CachetClusterClearReply.saturatingSum(totals[index], object.integers[index] ?? 0)
                }
                entry += Array(",\"status\":\"ok\",\"stats\":".utf8)
                entry += member.body[object.range]
            } else {
                let status = member.status == .ok ? CachetStatus.serverError : member.status
                let message =
                    member.status == .ok ? "malformed STATS reply" : String(decoding: member.body, as: UTF8.self)
                entry += Array(",\"status\":".utf8)
                CachetJSONText.appendString(Self.statusName(status), to: &entry)
                entry += Array(",\"error\":".utf8)
                CachetJSONText.appendString(message, to: &entry)
            }
            entry.append(UInt8(ascii: "}"))
            entries.append(entry)
        }
        var output: [UInt8] = Array("{\"cluster\":true,\"answered_by\":".utf8)
        CachetJSONText.appendString(answeredBy, to: &output)
        output += Array(",\"cluster_hash\":".utf8)
        CachetJSONText.appendString(clusterHash, to: &output)
        output += Array(",\"members_total\":\(members.count),\"members_ok\":\(okCount),\"totals\":{".utf8)
        for (index, field) in Self.totalFields.enumerated() {
            if index > 0 { output.append(UInt8(ascii: ",")) }
            output += Array("\"\(field)\":\(totals[index])".utf8)
        }
        output += Array("},\"members\":[".utf8)
        for (index, entry) in entries.enumerated() {
            if index > 0 { output.append(UInt8(ascii: ",")) }
            output += entry
        }
        output += Array("]}".utf8)
        return output
    }
}

/// Just enough JSON for the cluster STATS reply: writing strings, and finding the integer fields at the
/// top of a node's STATS object without building it.
enum CachetJSONText {
    /// Appends `text` as a JSON string: `"` and `\` escaped with a backslash, bytes below 0x20 as
    /// `\u00xx` (lowercase hex), everything else as its UTF-8.
    static func appendString(_ text: String, to output: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        output.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                output.append(UInt8(ascii: "\\"))
                output.append(byte)
            case 0..<0x20:
                output += Array("\\u00".utf8)
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0xf)])
            default:
                output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }

    /// Finds the one JSON object in `bytes` (whitespace around it allowed) and the values of the named
    /// top-level fields that are unsigned integers (digits only; larger than `UInt64` saturates).
    ///
    /// - Returns: the object's range in `bytes` and the integers by position in `names` (`nil` where
    ///   absent or not an unsigned integer), or `nil` when `bytes` is not one well-nested object.
    /// - Complexity: O(n) in the bytes.
    static func scanObject(_ bytes: [UInt8], integers names: [String]) -> (range: Range<Int>, integers: [UInt64?])? {
        let wanted = names.map { Array($0.utf8) }
        var values = [UInt64?](repeating: nil, count: names.count)
        var position = 0
        func skipWhitespace() {
            while position < bytes.count, [0x20, 0x09, 0x0a, 0x0d].contains(bytes[position]) { position += 1 }
        }
        /// Skips a string starting at its opening quote; returns the range of its raw contents.
        func skipString() -> Range<Int>? {
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { return nil }
            position += 1
            let start = position
            while position < bytes.count {
                switch bytes[position] {
                case UInt8(ascii: "\\"): position += 2
                case UInt8(ascii: "\""):
                    position += 1
                    return start..<(position - 1)
                default: position += 1
                }
            }
            return nil
        }
        /// Skips any value; nested objects and arrays by depth, strings by their quotes.
        func skipValue() -> Bool {
            guard position < bytes.count else { return false }
            switch bytes[position] {
            case UInt8(ascii: "\""): return skipString() != nil
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                var depth = 0
                while position < bytes.count {
                    switch bytes[position] {
                    case UInt8(ascii: "\""): if skipString() == nil { return false } else { continue }
                    case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                    case UInt8(ascii: "}"), UInt8(ascii: "]"):
                        depth -= 1
                        if depth == 0 {
                            position += 1
                            return true
                        }
                    default: break
                    }
                    position += 1
                }
                return false
            default:
                let start = position
                while position < bytes.count,
                    ![UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x09, 0x0a, 0x0d]
                        .contains(bytes[position])
                {
                    position += 1
                }
                return position > start
            }
        }
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: "{") else { return nil }
        let objectStart = position
        position += 1
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
        } else {
            while true {
                skipWhitespace()
                guard let key = skipString() else { return nil }
                skipWhitespace()
                guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { return nil }
                position += 1
                skipWhitespace()
                let valueStart = position
                guard skipValue() else { return nil }
                if let index = wanted.firstIndex(where: { $0.elementsEqual(bytes[key]) }) {
                    let digits = bytes[valueStart..<position]
                    if !digits.isEmpty, digits.allSatisfy({ (0x30...0x39).contains($0) }) {
                        var value: UInt64 = 0
                        for digit in digits {
                            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
                            let (sum, o2) = times10.addingReportingOverflow(UInt64(digit - 0x30))
                            value = o1 || o2 ? UInt64.max : sum
                            if value == UInt64.max { break }
                        }
                        values[index] = value
                    }
                }
                skipWhitespace()
                guard position < bytes.count else { return nil }
                if bytes[position] == UInt8(ascii: ",") {
                    position += 1
                    continue
                }
                guard bytes[position] == UInt8(ascii: "}") else { return nil }
                position += 1
                break
            }
        }
        let objectEnd = position
        skipWhitespace()
        guard position == bytes.count else { return nil }
        return (objectStart..<objectEnd, values)
    }
}
