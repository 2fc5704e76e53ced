import CachetWire

/// The head of an HTTP/1.1 response: its status line and header fields, written as bytes. The node's HTTP
/// port writes every response with it (values, metrics, health, errors).
public struct HTTPResponseHead: Sendable, Equatable {
    /// The status code.
    public var status: Int
    /// The header fields, in the order written (`Content-Length`, `Date` and `Connection` are added by
    /// ``encoded(contentLength:date:keepAlive:)``).
    public var fields: [(name: String, value: String)]

    /// A head with `status` and `fields`.
    public init(status: Int, fields: [(name: String, value: String)] = []) {
        self.status = status
        self.fields = fields
    }

    public static func == (lhs: HTTPResponseHead, rhs: HTTPResponseHead) -> Bool {
        lhs.status == rhs.status && lhs.fields.elementsEqual(rhs.fields, by: { $0 == $1 })
    }

    /// The value of field `name` (compared without case), if present.
    public subscript(name: String) -> String? {
        fields.first(where: { $0.name.lowercased() == name.lowercased() })?.value
    }

    /// The bytes of the head.
    /// - Parameters:
    ///   - contentLength: the body's length (for HEAD, the length a GET's body would have), written as
    ///     `Content-Length`; nil writes none (a 304).
    ///   - date: the `Date` field's value (``HTTPDate``).
    ///   - keepAlive: whether the connection stays open; `Connection: close` is written otherwise.
    /// - Returns: the status line, the fields and the blank line.
    public func encoded(contentLength: UInt64?, date: String, keepAlive: Bool) -> [UInt8] {
        var text = "HTTP/1.1 \(status) \(Self.reason(status))\r\n"
        for field in fields { text += "\(field.name): \(field.value)\r\n" }
        if let contentLength { text += "Content-Length: \(contentLength)\r\n" }
        text += "Date: \(date)\r\n"
        if !keepAlive { text += "Connection: close\r\n" }
        text += "\r\n"
        return Array(text.utf8)
    }

    /// The reason phrase of a status code.
    public static func reason(_ status: Int) -> String {
        switch status {
        case 200: return "OK"
        case 206: return "Partial Content"
        case 304: return "Not Modified"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 413: return "Content Too Large"
        case 416: return "Range Not Satisfiable"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 503: return "Service Unavailable"
        default: return "Status \(status)"
        }
    }
}

/// The `Date` field's form of a time (RFC 9110, 5.6.7, IMF-fixdate): `Sun, 06 Nov 1994 08:49:37 GMT`.
public enum HTTPDate {
    /// The IMF-fixdate of `seconds` since the Unix epoch.
    /// - Parameter seconds: seconds since 1970-01-01T00:00:00Z.
    public static func format(_ seconds: Int64) -> String {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let second = seconds - days * 86_400
        let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][Int(((days % 7) + 7) % 7)]
        // Days to a civil date (Howard Hinnant's algorithm).
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(weekday), \(two(day)) \(months[Int(month - 1)]) \(year) "
            + "\(two(second / 3600)):\(two(second / 60 % 60)):\(two(second % 60)) GMT"
    }
}

/// The credentials an HTTP request carries (`docs/node.md`, "Values over HTTP"): HTTP Basic, or a bearer
/// token `USER:SECRET` in the `Authorization` field (RFC 6750) or, for a player that cannot set fields (a
/// `<video src>`), in the `access_token` query parameter; the field wins.
public struct HTTPCredentials: Sendable, Equatable {
    /// The user's name.
    public var user: [UInt8]
    /// The user's secret.
    public var secret: [UInt8]

    /// A user and secret.
    public init(user: [UInt8], secret: [UInt8]) {
        self.user = user
        self.secret = secret
    }

    /// What a request carries.
    public enum Found: Sendable, Equatable {
        /// No credentials.
        case none
        /// Credentials that could be read.
        case given(HTTPCredentials)
        /// An `Authorization` field or token that is neither form.
        case malformed
    }

    /// Reads the credentials of a request.
    /// - Parameters:
    ///   - authorization: the `Authorization` field, if sent.
    ///   - token: the `access_token` query parameter, percent-decoded, if sent.
    public static func find(authorization: String?, token: String?) -> Found {
        guard let authorization else {
            guard let token else { return .none }
            return split(Array(token.utf8)).map(Found.given) ?? .malformed
        }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return .malformed }
        let payload = String(parts[1]).trimmingSpacesAndTabs()
        switch parts[0].lowercased() {
        case "basic":
            guard let decoded = CachetBase64.decode(payload.utf8) else { return .malformed }
            return split(decoded).map(Found.given) ?? .malformed
        case "bearer":
            return split(Array(payload.utf8)).map(Found.given) ?? .malformed
        default:
            return .malformed
        }
    }

    /// `user:secret` split at its first colon; nil without one or with an empty user.
    private static func split(_ bytes: [UInt8]) -> HTTPCredentials? {
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0 else { return nil }
        return HTTPCredentials(user: Array(bytes[..<colon]), secret: Array(bytes[(colon + 1)...]))
    }
}
