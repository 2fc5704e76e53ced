import CachetWire
import Foundation

/// Turns replies and frames into the text the client prints.
public enum CachetCLIFormatter {
    /// Bytes as a person reads them: UTF-8 text when they are printable UTF-8, otherwise `0x` and hex.
    /// - Parameter bytes: a key or value.
    /// - Returns: the rendering.
    public static func render(_ bytes: [UInt8]) -> String {
        if let text = String(validating: bytes, as: UTF8.self),
            text.unicodeScalars.allSatisfy({
                $0.value >= 0x20 && $0.value != 0x7f || $0 == "\t" || $0 == "\n" || $0 == "\r"
            })
        {
            return text
        }
        return "0x" + hex(bytes)
    }

    /// Lower-case hex digits, no separators.
    /// - Parameter bytes: the bytes.
    /// - Returns: two digits per byte.
    public static func hex<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A quoted rendering for trace lines: `"text"` or `0x…`, cut after 48 bytes.
    static func quoted(_ bytes: ArraySlice<UInt8>) -> String {
        let shown = Array(bytes.prefix(48))
        let more = bytes.count > 48 ? "…(+\(bytes.count - 48) bytes)" : ""
        let rendered = render(shown)
        return (rendered.hasPrefix("0x") && !shown.isEmpty ? rendered : "\"\(rendered)\"") + more
    }

    /// The `stats` table: one `name  value` line per field, sorted by name, values aligned.
    /// - Parameter json: the STATS reply body.
    /// - Returns: the lines, or the raw text when the body is not a JSON object.
    public static func statsTable(_ json: [UInt8]) -> [String] {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any] else {
            return [String(decoding: json, as: UTF8.self)]
        }
        let width = object.keys.map(\.count).max() ?? 0
        return object.keys.sorted().map { key in
            let value = object[key].map(statsValue) ?? ""
            return key.padding(toLength: width, withPad: " ", startingAt: 0) + "  " + value
        }
    }

    /// The answer to `--cluster clear`: a summary line, then one line per member by id with what it
    /// removed or its error. A 16-byte body means the node answered for itself alone (it does not fan
    /// out); that is said rather than hidden.
    /// - Parameter body: the OK CLEAR reply body.
    /// - Returns: the lines, and whether every member answered OK.
    public static func clusterClear(_ body: [UInt8]) -> (lines: [String], allAnswered: Bool) {
        guard CachetClusterClearReply.isAggregate(body) else {
            guard let single = try? CachetClearResult(decoding: body) else { return (["OK"], true) }
            return (
                [
                    "OK (removed \(single.items) items, \(single.bytes) bytes)",
                    "note: the node answered for itself only; it does not fan out cluster-wide CLEAR",
                ], true
            )
        }
        guard let reply = try? CachetClusterClearReply(decoding: body) else {
            return (["ERROR: malformed cluster CLEAR reply (\(body.count) bytes): 0x" + hex(body.prefix(64))], false)
        }
        let answered = reply.members.filter { $0.status == .ok }.count
        var lines = [
            "OK (removed \(reply.total.items) items, \(reply.total.bytes) bytes; "
                + "\(answered) of \(reply.members.count) members answered)"
        ]
        let width = reply.members.map(\.id.count).max() ?? 0
        for member in reply.members {
            let id = member.id.padding(toLength: width, withPad: " ", startingAt: 0)
            if member.status == .ok {
                lines.append("\(id)  OK  removed \(member.result.items) items, \(member.result.bytes) bytes")
            } else {
                lines.append("\(id)  \(member.status)  \(member.message)")
            }
        }
        return (lines, answered == reply.members.count)
    }

    /// What `items` and `disk_items` count, printed under a cluster's figures: a member whose values sit on
    /// disk shows few items in memory.
    static let itemsLegend =
        "(items: entries in memory; disk_items: entries on disk, where every write goes, memory's included)"

    /// The answer to `--cluster stats`: the totals, then one line per member by id with its main figures
    /// (those the totals sum) or its error, and a line saying what `items` counts. A body without `members` means the node answered for itself
    /// alone (it does not fan out); its own table is printed after a note saying so.
    /// - Parameter body: the OK STATS reply body.
    /// - Returns: the lines, and whether every member answered OK.
    public static func clusterStats(_ body: [UInt8]) -> (lines: [String], allAnswered: Bool) {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            return ([String(decoding: body, as: UTF8.self)], false)
        }
        guard let members = object["members"] as? [[String: Any]] else {
            return (
                ["note: the node answered for itself only; it does not fan out cluster-wide STATS"]
                    + statsTable(body), true
            )
        }
        let total = members.count
        let answered = members.filter { $0["status"] as? String == "ok" }.count
        var lines = [
            "cluster \(object["cluster_hash"] as? String ?? "?") answered by \(object["answered_by"] as? String ?? "?"): "
                + "\(answered) of \(total) members answered"
        ]
        func figures(_ fields: [String: Any]) -> String {
            CachetClusterStatsReply.totalFields.compactMap { field in
                fields[field].map { "\(field)=\(statsValue($0))" }
            }.joined(separator: " ")
        }
        let ids = members.map { $0["id"] as? String ?? "?" }
        let width = max(ids.map(\.count).max() ?? 0, "totals".count)
        lines.append(
            "totals".padding(toLength: width, withPad: " ", startingAt: 0) + "  "
                + figures(object["totals"] as? [String: Any] ?? [:])
        )
        for (member, id) in zip(members, ids) {
            let padded = id.padding(toLength: width, withPad: " ", startingAt: 0)
            let status = member["status"] as? String ?? "?"
            if status == "ok" {
                lines.append(padded + "  " + figures(member["stats"] as? [String: Any] ?? [:]))
            } else {
                lines.append(padded + "  " + status.uppercased() + "  " + (member["error"] as? String ?? ""))
            }
        }
        lines.append(Self.itemsLegend)
        return (lines, answered == total)
    }

    /// A STATS value as text: numbers and strings as they are, lists and objects (such as `cluster_members`)
    /// as compact JSON with sorted keys.
    private static func statsValue(_ value: Any) -> String {
        guard value is [Any] || value is [String: Any],
            let data = try? JSONSerialization.data(
                withJSONObject: value,
                options: [.sortedKeys, .withoutEscapingSlashes]
            )
        else { return "\(value)" }
        return String(decoding: data, as: UTF8.self)
    }

    /// The trace of one frame: a summary line and a hex line grouped by field.
    /// - Parameters:
    ///   - frame: the frame's bytes.
    ///   - outgoing: true for a request, false for a reply.
    /// - Returns: two lines.
    public static func trace(_ frame: [UInt8], outgoing: Bool) -> [String] {
        let arrow = outgoing ? ">>" : "<<"
        guard frame.count >= CachetProtocol.frameOverhead else {
            return ["\(arrow) \(frame.count) bytes (short frame)", "   " + hex(frame)]
        }
        let length = frame[0..<4].reduce(0) { $0 << 8 | Int($1) }
        let version = frame[4]
        let opcode = CachetOpcode(rawValue: frame[5])
        let word = UInt16(frame[6]) << 8 | UInt16(frame[7])
        let id = frame[8..<12].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let body = frame[12...]
        let opcodeText = "\(opcode)(0x\(hex([opcode.rawValue])))"
        let wordText =
            outgoing
            ? "flags=0x\(hex([UInt8(word >> 8), UInt8(word & 0xff)]))"
            : "status=\(CachetStatus(rawValue: word))(\(word))"
        var summary = "\(arrow) \(frame.count) bytes  len=\(length) v=\(version) op=\(opcodeText) \(wordText) id=\(id)"
        let annotation =
            outgoing
            ? requestBody(opcode: opcode, body: body)
            : replyBody(opcode: opcode, status: CachetStatus(rawValue: word), body: body)
        if !annotation.isEmpty { summary += " | " + annotation }
        var groups = [hex(frame[0..<4]), hex(frame[4..<5]), hex(frame[5..<6]), hex(frame[6..<8]), hex(frame[8..<12])]
        groups += bodyGroups(opcode: opcode, outgoing: outgoing, body: body)
        return [summary, "   " + groups.joined(separator: " ")]
    }

    private static func requestBody(opcode: CachetOpcode, body: ArraySlice<UInt8>) -> String {
        switch opcode {
        case .put where body.count >= 6:
            let ttl = body.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            let keyLength = Int(body[body.startIndex + 4]) << 8 | Int(body[body.startIndex + 5])
            let key = body.dropFirst(6).prefix(keyLength)
            let value = body.dropFirst(6 + keyLength)
            return "ttl=\(ttl) key_len=\(keyLength) key=\(quoted(key)) value=\(quoted(value))"
        case .get, .delete:
            guard body.count >= 2 else { return body.isEmpty ? "" : "body=\(quoted(body))" }
            let keyLength = Int(body[body.startIndex]) << 8 | Int(body[body.startIndex + 1])
            let rest = body.dropFirst(2 + keyLength)
            if opcode == .get && rest.count == CachetValueRange.encodedSize {
                // A GET of a range: the offset and length after the key.
                let offset = rest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                let length = rest.suffix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                let range = CachetValueRange(offset: offset, length: length)
                return "key_len=\(keyLength) key=\(quoted(body.dropFirst(2).prefix(keyLength))) range=\(range)"
            }
            return "key_len=\(keyLength) key=\(quoted(body.dropFirst(2)))"
        default:
            return body.isEmpty ? "" : "body=\(quoted(body))"
        }
    }

    private static func replyBody(opcode: CachetOpcode, status: CachetStatus, body: ArraySlice<UInt8>) -> String {
        if status != .ok && status != .notFound { return "message=\(quoted(body))" }
        if opcode == .clear && status == .ok && body.count == 16 {
            let items = body.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let bytes = body.suffix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            return "items=\(items) bytes=\(bytes)"
        }
        return body.isEmpty ? "" : "body=\(quoted(body))"
    }

    private static func bodyGroups(opcode: CachetOpcode, outgoing: Bool, body: ArraySlice<UInt8>) -> [String] {
        guard !body.isEmpty else { return [] }
        let shown = body.prefix(64)
        let more = body.count > 64 ? ["…(+\(body.count - 64) bytes)"] : []
        if outgoing && opcode == .put && body.count >= 6 {
            let keyLength = Int(body[body.startIndex + 4]) << 8 | Int(body[body.startIndex + 5])
            let groups = [
                hex(shown.prefix(4)), hex(shown.dropFirst(4).prefix(2)), hex(shown.dropFirst(6).prefix(keyLength)),
                hex(shown.dropFirst(6 + keyLength)),
            ]
            return groups.filter { !$0.isEmpty } + more
        }
        if outgoing && (opcode == .get || opcode == .delete) && body.count >= 2 {
            return [hex(shown.prefix(2)), hex(shown.dropFirst(2))].filter { !$0.isEmpty } + more
        }
        return [hex(shown)] + more
    }
}
