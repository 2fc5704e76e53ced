public import CachetWire

/// What an HTTP request for a value asks (`docs/node.md`, "Values over HTTP"): a key from the path
/// `/values/KEY` (percent-encoded), and at most one byte range from its `Range` header. Pure: the node's
/// HTTP port turns it into GETs of ranges on its own command layer, all of one tag, so that every response
/// is one consistent reading of the value (never a mixture of two writes), forwarded in a cluster like any
/// GET.
public struct HTTPValueRequest: Sendable, Equatable {
    /// The key's bytes.
    public var key: [UInt8]
    /// The byte range the `Range` header asks for; nil for the whole value.
    public var range: ByteRange?

    /// The path prefix values are served under.
    public static let pathPrefix = "/values/"

    /// A byte range of an HTTP `Range` header (RFC 9110, 14.1.2), before the value's length is known.
    public enum ByteRange: Sendable, Equatable {
        /// `bytes=FIRST-` or `bytes=FIRST-LAST` (LAST included).
        case from(UInt64, through: UInt64?)
        /// `bytes=-N`: the last N bytes.
        case suffix(UInt64)

        /// Whether it is `bytes=-N`.
        public var isSuffix: Bool {
            if case .suffix = self { return true }
            return false
        }

        /// The range the node is asked for: the bytes it names, or, for a suffix, every byte (the length
        /// is learned from the reply, and the suffix cut from it).
        public var valueRange: CachetValueRange {
            switch self {
            case .from(let first, let last):
                // A last byte at the largest offset there is means "to the end" (and its length would overflow).
                guard let last, last < UInt64.max else { return CachetValueRange(offset: first) }
                guard last >= first else { return CachetValueRange(offset: first, length: 0) }
                return CachetValueRange(offset: first, length: last - first + 1)
            case .suffix:
                return CachetValueRange(offset: 0)
            }
        }

        /// The offsets served out of a value of `total` bytes, or nil when the range cannot be satisfied
        /// (416): it starts at or past the end, or is an empty suffix.
        public func bounds(total: UInt64) -> Range<UInt64>? {
            switch self {
            case .from(let first, let last):
                guard first < total, (last ?? .max) >= first else { return nil }
                let end = last.map { $0 < total ? $0 + 1 : total } ?? total
                return first..<end
            case .suffix(let count):
                guard count > 0, total > 0 else { return nil }
                return (total - min(count, total))..<total
            }
        }
    }

    /// Reads a request's path and `Range` header.
    /// - Parameters:
    ///   - path: the request's path, `/values/` then the percent-encoded key.
    ///   - rangeHeader: the `Range` header's value, if any. One that is not a single byte range
    ///     (`bytes=A-B`, `bytes=A-`, `bytes=-N`) is ignored, as RFC 9110 allows: the whole value is sent.
    /// - Returns: the request, or nil when the path names no key of 1 to 4096 bytes.
    public init?(path: String, rangeHeader: String?) {
        guard path.hasPrefix(Self.pathPrefix),
            let key = Self.percentDecoded(path.dropFirst(Self.pathPrefix.count)),
            (1...CachetProtocol.maximumKeyLength).contains(key.count)
        else { return nil }
        self.key = key
        self.range = rangeHeader.flatMap(Self.parseRange)
    }

    /// `bytes=A-B`, `bytes=A-` or `bytes=-N`; nil for anything else (other units, several ranges, bad numbers).
    static func parseRange(_ header: String) -> ByteRange? {
        let trimmed = header.trimmingSpacesAndTabs()
        guard trimmed.lowercased().hasPrefix("bytes=") else { return nil }
        let spec = trimmed.dropFirst("bytes=".count).trimmingSpacesAndTabs()
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
        let first = spec[..<dash].trimmingSpacesAndTabs()
        let last = spec[spec.index(after: dash)...].trimmingSpacesAndTabs()
        // Digits only (`UInt64` would also take a sign).
        guard (first + last).allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        if first.isEmpty {
            guard let count = UInt64(last) else { return nil }
            return .suffix(count)
        }
        guard let start = UInt64(first) else { return nil }
        if last.isEmpty { return .from(start, through: nil) }
        guard let end = UInt64(last), end >= start else { return nil }
        return .from(start, through: end)
    }

    /// The bytes of a percent-encoded path segment; nil for a bad escape.
    static func percentDecoded(_ text: Substring) -> [UInt8]? {
        var bytes: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let byte = utf8.popFirst() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard utf8.count >= 2, let high = hexValue(utf8.popFirst()!), let low = hexValue(utf8.popFirst()!) else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// The `Content-Type` for the key, from its extension (what a player needs to pick a decoder), else
    /// `application/octet-stream`.
    public var contentType: String {
        let name = String(decoding: key, as: UTF8.self).lowercased()
        guard let dot = name.lastIndex(of: ".") else { return "application/octet-stream" }
        switch name[name.index(after: dot)...] {
        case "webm": return "video/webm"
        case "mp4", "m4v": return "video/mp4"
        case "m4a": return "audio/mp4"
        case "mp3": return "audio/mpeg"
        case "ogg", "ogv": return "video/ogg"
        case "ts": return "video/mp2t"
        case "m3u8": return "application/vnd.apple.mpegurl"
        case "mpd": return "application/dash+xml"
        case "jpg", "jpeg": return "image/jpeg"
        case "png": return "image/png"
        case "json": return "application/json"
        case "txt": return "text/plain; charset=utf-8"
        case "html": return "text/html; charset=utf-8"
        default: return "application/octet-stream"
        }
    }
}
