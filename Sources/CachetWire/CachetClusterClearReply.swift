/// The body of an OK reply to a cluster-wide CLEAR (``CachetRequestFlags/cluster``): the aggregate and
/// each member's result. Layout in `Protocol/PROTOCOL.md`, "Cluster-wide CLEAR and STATS":
///
/// ```
/// items: u64 | bytes: u64 | member_count: u16 |
///   member_count × (id_len: u16 | id | status: u16 | items: u64 | bytes: u64 | message_len: u16 | message)
/// ```
///
/// It starts as today's 16-byte CLEAR body (the totals), and is always longer, so a client tells a node
/// that fanned out from one that ignored the flag by the body's length alone.
public struct CachetClusterClearReply: Hashable, Sendable {
    /// One member's outcome.
    public struct Member: Hashable, Sendable {
        /// The member's id.
        public var id: String
        /// The status the member answered; UNAVAILABLE when it was marked down, refused, or missed the
        /// deadline.
        public var status: CachetStatus
        /// What the member removed (zero unless `status` is OK).
        public var result: CachetClearResult
        /// Why the member failed (empty when `status` is OK).
        public var message: String

        /// Creates a member's outcome.
        /// - Parameters:
        ///   - id: the member's id.
        ///   - status: its reply's status.
        ///   - result: what it removed.
        ///   - message: the error message, empty on OK.
        public init(
            id: String,
            status: CachetStatus,
            result: CachetClearResult = CachetClearResult(items: 0, bytes: 0),
            message: String = ""
        ) {
            self.id = id
            self.status = status
            self.result = result
            self.message = message
        }
    }

    /// The longest message written per member, in bytes; a longer one is cut at a character boundary.
    public static let maximumMessageLength = 1024

    /// Entries and bytes removed by the members that answered OK.
    public var total: CachetClearResult
    /// Every member, in ring order (ascending id bytes).
    public var members: [Member]

    /// Creates a reply whose total is the sum of the OK members' results (saturating at `UInt64.max`).
    /// - Parameter members: each member's outcome, in ring order.
    public init(members: [Member]) {
        var items: UInt64 = 0
        var bytes: UInt64 = 0
        for member in members where member.status == .ok {
            items = Self.saturatingSum(items, member.result.items)
            bytes = Self.saturatingSum(bytes, member.result.bytes)
        }
        self.total = CachetClearResult(items: items, bytes: bytes)
        self.members = members
    }

    /// Whether a CLEAR reply body is the cluster-wide one (anything but 16 bytes) rather than a single
    /// node's.
    /// - Parameter body: an OK CLEAR reply body.
    /// - Returns: `true` for the aggregate layout.
    public static func isAggregate(_ body: [UInt8]) -> Bool { body.count != CachetProtocol.clearReplySize }

    /// The reply body. Member ids over 65535 bytes cannot occur (ids are at most 255 bytes).
    public var encoded: [UInt8] {
        var output: [UInt8] = []
        CachetFrameEncoder.appendBigEndian(total.items, to: &output)
        CachetFrameEncoder.appendBigEndian(total.bytes, to: &output)
        CachetFrameEncoder.appendBigEndian(UInt16(clamping: members.count), to: &output)
        for member in members.prefix(Int(UInt16.max)) {
            let id = Array(member.id.utf8.prefix(Int(UInt16.max)))
            CachetFrameEncoder.appendBigEndian(UInt16(id.count), to: &output)
            output.append(contentsOf: id)
            CachetFrameEncoder.appendBigEndian(member.status.rawValue, to: &output)
            CachetFrameEncoder.appendBigEndian(member.result.items, to: &output)
            CachetFrameEncoder.appendBigEndian(member.result.bytes, to: &output)
            let message = Self.truncated(member.message)
            CachetFrameEncoder.appendBigEndian(UInt16(message.count), to: &output)
            output.append(contentsOf: message)
        }
        return output
    }

    /// Reads an aggregate CLEAR body. The total is read as sent, not recomputed.
    /// - Parameter body: the reply body.
    /// - Throws: ``CachetWireError`` `malformedReply` when a length runs past the body or bytes follow
    ///   the last member.
    public init(decoding body: [UInt8]) throws(CachetWireError) {
        var reader = Reader(bytes: body)
        let items = try reader.u64()
        let bytes = try reader.u64()
        let count = Int(try reader.u16())
        var members: [Member] = []
        members.reserveCapacity(count)
        for _ in 0..<count {
            let id = try reader.string(length: Int(try reader.u16()))
            let status = CachetStatus(rawValue: try reader.u16())
            let result = CachetClearResult(items: try reader.u64(), bytes: try reader.u64())
            let message = try reader.string(length: Int(try reader.u16()))
            members.append(Member(id: id, status: status, result: result, message: message))
        }
        guard reader.offset == body.count else {
            throw Reader.malformed("\(body.count - reader.offset) bytes after the last member")
        }
        self.total = CachetClearResult(items: items, bytes: bytes)
        self.members = members
    }

    static func saturatingSum(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? UInt64.max : sum
    }

    /// The UTF-8 of `message`, cut to whole characters within ``maximumMessageLength`` bytes.
    static func truncated(_ message: String) -> [UInt8] {
        var bytes: [UInt8] = []
        for scalar in message.unicodeScalars {
            let utf8 = Array(String(scalar).utf8)
            guard bytes.count + utf8.count <= maximumMessageLength else { break }
            bytes.append(contentsOf: utf8)
        }
        return bytes
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        static func malformed(_ reason: String) -> CachetWireError {
            CachetWireError(code: .malformedReply, message: "cluster CLEAR reply: \(reason)")
        }

        mutating func take(_ count: Int) throws(CachetWireError) -> ArraySlice<UInt8> {
            guard bytes.count - offset >= count else {
                throw Self.malformed("needs \(count) bytes at offset \(offset), has \(bytes.count - offset)")
            }
            defer { offset += count }
            return bytes[offset..<(offset + count)]
        }

        mutating func u64() throws(CachetWireError) -> UInt64 {
            try take(8).reduce(0) { $0 << 8 | UInt64($1) }
        }

        mutating func u16() throws(CachetWireError) -> UInt16 {
            try take(2).reduce(0) { $0 << 8 | UInt16($1) }
        }

        mutating func string(length: Int) throws(CachetWireError) -> String {
            String(decoding: try take(length), as: UTF8.self)
        }
    }
}
