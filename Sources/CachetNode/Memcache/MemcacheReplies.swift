import CachetIO
import CachetMemcache
import CachetStore
import CachetWire

#if canImport(Glibc)
import Glibc
#endif

/// The native replies of a ``MemcacheSession``'s requests, written as memcached's lines
/// (memcached's `protocol.txt`): what each status means for the command it answers.
enum MemcacheReplies {
    /// Appends the lines for one native reply (`status`, `body`) to what `pending` asked.
    static func append(
        _ pending: MemcacheSession.Pending,
        status: CachetStatus,
        body: UnsafeRawBufferPointer,
        session: MemcacheSession,
        to text: inout CachetByteBuffer
    ) {
        var lines: [UInt8] = []
        switch pending.reply {
        case .value(let keyLength, let withCAS, let last):
            let key = UnsafeRawBufferPointer(rebasing: session.replyKeys.readableRegion[..<keyLength])
            defer { session.replyKeys.moveReadIndex(forwardBy: keyLength) }
            if session.failedRetrieval {
                // An earlier key of this command failed: its error line ended the command.
                if last { session.failedRetrieval = false }
                return
            }
            if status == .ok, body.count >= CachetItemWrite.itemReplyPrefixSize {
                // Written straight into the text: VALUE key flags bytes [cas], the data, then END after the last.
                let flags = body.loadUnaligned(as: UInt32.self).bigEndian
                let cas = body.loadUnaligned(fromByteOffset: 4, as: UInt64.self).bigEndian
                let data = UnsafeRawBufferPointer(rebasing: body[CachetItemWrite.itemReplyPrefixSize...])
                appendValue(key: key, flags: flags, cas: withCAS ? cas : nil, value: data, to: &text)
                if last { appendEnd(to: &text) }
                return
            } else if status != .notFound {
                lines = errorLine(status, body)
                session.failedRetrieval = !last
                text.append(lines)
                return
            }
            if last { lines += MemcacheTextReply.end }
        case .stored:
            switch status {
            case .ok:
                if !pending.quiet { text.append("STORED\r\n" as StaticString) }
                return
            case .notStored: lines = MemcacheTextReply.notStored
            case .exists: lines = MemcacheTextReply.exists
            case .notFound: lines = MemcacheTextReply.notFound
            default: lines = errorLine(status, body)
            }
        case .storedExpired:
            lines = status == .ok || status == .notFound ? MemcacheTextReply.stored : errorLine(status, body)
        case .deleted:
            switch status {
            case .ok: lines = MemcacheTextReply.deleted
            case .notFound: lines = MemcacheTextReply.notFound
            default: lines = errorLine(status, body)
            }
        case .number:
            if status == .ok, body.count >= 16 {
                guard !pending.quiet else { return }
                text.reserveWritable(22)
                let count = MemcacheTextReply.writeDecimal(
                    body.loadUnaligned(fromByteOffset: 8, as: UInt64.self).bigEndian,
                    to: text.writePointer
                )
                text.moveWriteIndex(forwardBy: count)
                return text.append(lineEnd)
            } else if status == .notFound {
                lines = MemcacheTextReply.notFound
            } else if status == .badRequest {
                lines = Array("CLIENT_ERROR cannot increment or decrement non-numeric value\r\n".utf8)
            } else {
                lines = errorLine(status, body)
            }
        case .touched:
            switch status {
            case .ok: lines = MemcacheTextReply.touched
            case .notFound: lines = MemcacheTextReply.notFound
            default: lines = errorLine(status, body)
            }
        case .ok:
            lines = status == .ok ? MemcacheTextReply.ok : errorLine(status, body)
        case .stats:
            lines = status == .ok ? stats(fromJSON: body, version: session.version) : errorLine(status, body)
        case .authenticated:
            if status == .ok {
                session.authenticated = true
                lines = MemcacheTextReply.stored
            } else {
                lines = Array("CLIENT_ERROR authentication failure\r\n".utf8)
            }
        case .literal(let line):
            lines = line
        case .meta(let meta):
            return MemcacheMeta.append(meta, status: status, body: body, session: session, to: &text)
        case .metaTTL:
            return MemcacheMeta.appendHeldArithmetic(status: status, body: body, session: session, to: &text)
        case .discard:
            return
        }
        if !pending.quiet && !lines.isEmpty { text.append(lines) }
    }

    private static let lineEnd: [UInt8] = [13, 10]

    /// The line for a status that is an error of the command: memcached's `CLIENT_ERROR` for what the client
    /// did (not signed in, not allowed, a bad request), `SERVER_ERROR` for the rest, with the node's message
    /// on one line.
    /// The room a VALUE line, its value, the line end and an `END` after it take.
    static func valueRoom(keyLength: Int, valueLength: Int) -> Int {
        MemcacheTextReply.valueLineCapacity(keyLength: keyLength) + valueLength + 7
    }

    /// Appends `VALUE key flags bytes [cas]`, the value and its line end, written in room reserved once (and
    /// room for an `END` after it), with no call per piece.
    @inline(__always)
    static func appendValue(
        key: UnsafeRawBufferPointer,
        flags: UInt32,
        cas: UInt64?,
        value: UnsafeRawBufferPointer,
        to text: inout CachetByteBuffer
    ) {
        text.reserveWritable(valueRoom(keyLength: key.count, valueLength: value.count))
        let line = MemcacheTextReply.writeValueLine(
            key: key,
            flags: flags,
            length: value.count,
            cas: cas,
            to: text.writePointer
        )
        let end = text.writePointer + line
        if value.count > 0 { end.copyMemory(from: value.baseAddress!, byteCount: value.count) }
        end.storeBytes(of: 13, toByteOffset: value.count, as: UInt8.self)
        end.storeBytes(of: 10, toByteOffset: value.count + 1, as: UInt8.self)
        text.moveWriteIndex(forwardBy: line + value.count + 2)
    }

    /// Appends `END\r\n` (the end of a retrieval) in two stores.
    @inline(__always)
    static func appendEnd(to text: inout CachetByteBuffer) {
        text.reserveWritable(5)
        text.writePointer.storeBytes(of: UInt32(littleEndian: 0x0D44_4E45), as: UInt32.self)
        text.writePointer.storeBytes(of: 0x0A, toByteOffset: 4, as: UInt8.self)
        text.moveWriteIndex(forwardBy: 5)
    }

    static func errorLine(_ status: CachetStatus, _ body: UnsafeRawBufferPointer) -> [UInt8] {
        let message = String(decoding: body, as: UTF8.self).map { $0 == "\r" || $0 == "\n" ? " " : $0 }
        let said = String(message)
        switch status {
        case .notAuthenticated: return Array("CLIENT_ERROR unauthenticated\r\n".utf8)
        case .forbidden: return Array("CLIENT_ERROR forbidden: \(said)\r\n".utf8)
        case .badRequest: return Array("CLIENT_ERROR \(said)\r\n".utf8)
        case .tooLarge: return Array("SERVER_ERROR object too large for cache\r\n".utf8)
        default: return Array("SERVER_ERROR \(said.isEmpty ? "\(status)" : said)\r\n".utf8)
        }
    }

    /// memcached's `stats` lines from the node's STATS (a flat JSON object): the fields clients and
    /// exporters read, under memcached's names, then `END`.
    static func stats(fromJSON body: UnsafeRawBufferPointer, version: String) -> [UInt8] {
        let json = Array(body)
        func field(_ name: String) -> String? { jsonField(name, in: json) }
        var lines: [UInt8] = []
        func stat(_ name: String, _ value: String?) {
            guard let value else { return }
            lines += MemcacheTextReply.stat(name, value)
        }
        let now = CachetClock.now()
        stat("pid", "\(getpid())")
        stat("uptime", field("uptime_seconds"))
        stat("time", "\(now)")
        stat("version", version)
        stat("pointer_size", "\(MemoryLayout<Int>.size * 8)")
        stat("curr_connections", field("connections_current"))
        stat("total_connections", field("connections_total"))
        stat("rejected_connections", field("connections_rejected"))
        stat("max_connections", field("max_connections"))
        stat("cmd_get", field("gets"))
        stat("cmd_set", field("puts"))
        stat("get_hits", field("hits"))
        stat("get_misses", field("misses"))
        stat("curr_items", field("items"))
        stat("total_items", field("puts"))
        stat("bytes", field("memory_bytes"))
        stat("limit_maxbytes", field("memory_limit"))
        stat("evictions", field("evictions"))
        stat("expired_unfetched", field("expired"))
        stat("threads", field("io_queues"))
        stat("cachet_version", field("version"))
        stat("cachet_disk_items", field("disk_items"))
        stat("cachet_disk_bytes", field("disk_bytes"))
        lines += MemcacheTextReply.end
        return lines
    }

    /// The value of a top-level field of a flat JSON object as written (a number, or a string's contents);
    /// nil when absent.
    static func jsonField(_ name: String, in json: [UInt8]) -> String? {
        let needle = Array("\"\(name)\":".utf8)
        guard json.count > needle.count else { return nil }
        var index = 0
        while index + needle.count <= json.count {
            if json[index] == needle[0], Array(json[index..<(index + needle.count)]) == needle {
                var start = index + needle.count
                while start < json.count && json[start] == UInt8(ascii: " ") { start += 1 }
                guard start < json.count else { return nil }
                if json[start] == UInt8(ascii: "\"") {
                    guard let end = json[(start + 1)...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
                    return String(decoding: json[(start + 1)..<end], as: UTF8.self)
                }
                var end = start
                while end < json.count, json[end] != UInt8(ascii: ","), json[end] != UInt8(ascii: "}") { end += 1 }
                return String(decoding: json[start..<end], as: UTF8.self)
            }
            index += 1
        }
        return nil
    }
}
