public import CachetWire

/// Part of a value, read with ``CachetClient/get(_:range:)-(String,_)``.
public struct CachetValueSlice: Sendable, Equatable {
    /// The bytes of the range: fewer than asked for when the range runs past the value's end, or holds more
    /// than one reply frame (the node's `--max-frame`; ask again from where they end).
    public var bytes: [UInt8]
    /// The whole value's length, in bytes.
    public var totalLength: Int
    /// Where `bytes` start in the value.
    public var offset: Int
    /// The whole value's tag: a 64-bit checksum, equal for equal values on every node. Two slices with
    /// different tags come from different values (the key was written between the reads).
    public var tag: UInt64

    /// A part of a value.
    public init(bytes: [UInt8], totalLength: Int, offset: Int, tag: UInt64 = 0) {
        self.bytes = bytes
        self.totalLength = totalLength
        self.offset = offset
        self.tag = tag
    }
}

extension CachetClient {
    /// Bytes `range` of the value under `key`, in one request: a GET with the `range` flag
    /// (`Protocol/PROTOCOL.md`, "GET of a range"). The node sends only those bytes, and the value's whole
    /// length. A range that runs past the end is cut at the end (an empty range, or one starting exactly at
    /// the end, reads no bytes); one that starts past the end is an error.
    ///
    /// ```swift
    /// if let head = try await client.get("video:42", range: 0..<1_048_576) {
    ///     print(head.bytes.count, "of", head.totalLength)
    /// }
    /// ```
    /// - Parameters:
    ///   - key: 1 to 4096 bytes of UTF-8.
    ///   - range: offsets in the value; must not be negative.
    /// - Returns: the bytes and the value's length, or nil when the key is not stored.
    /// - Throws: ``CachetClientError``: `rangeNotSatisfiable` when `range` starts past the value's end (the
    ///   message gives its length), `badRequest` for a negative offset or a node older than ranges (it
    ///   refuses the body), else as ``get(_:)-(String)``.
    public func get(_ key: String, range: Range<Int>) async throws(CachetClientError) -> CachetValueSlice? {
        try await get(key: key.utf8, range: try Self.valueRange(range))
    }

    /// ``get(_:range:)-(String,_)`` for a key of bytes.
    public func get(_ key: [UInt8], range: Range<Int>) async throws(CachetClientError) -> CachetValueSlice? {
        try await get(key: key, range: try Self.valueRange(range))
    }

    /// The bytes of the value under `key` from `offset` to its end (see ``get(_:range:)-(String,_)``).
    public func get(_ key: String, from offset: Int) async throws(CachetClientError) -> CachetValueSlice? {
        guard offset >= 0 else { throw Self.negativeOffset(offset) }
        return try await get(key: key.utf8, range: CachetValueRange(offset: UInt64(offset)))
    }

    /// The bytes of `range` (``CachetValueRange``: an offset, and a length or "to the end") of the value under
    /// the key of bytes `key` (see ``get(_:range:)-(String,_)``).
    public func get(_ key: [UInt8], range: CachetValueRange) async throws(CachetClientError) -> CachetValueSlice? {
        try await get(key: key, range: range)
    }

    static func valueRange(_ range: Range<Int>) throws(CachetClientError) -> CachetValueRange {
        guard range.lowerBound >= 0 else { throw negativeOffset(range.lowerBound) }
        return CachetValueRange(range)
    }

    static func negativeOffset(_ offset: Int) -> CachetClientError {
        CachetClientError(code: .badRequest, message: "range offset \(offset) is negative: offsets start at 0")
    }

    func get(key: some Collection<UInt8>, range: CachetValueRange) async throws(CachetClientError)
        -> CachetValueSlice?
    {
        try withBytes(key) { (key) throws(CachetClientError) in try ClientRequest.validate(key: key) }
        let (status, body, node) = try await execute(
            key: key,
            value: range.encoded,
            opcode: .get,
            ttl: 0,
            lease: .rangeGet
        )
        switch status {
        case .ok:
            guard let (total, tag, start) = CachetValueRange.decodeReply(body), total <= UInt64(Int.max),
                let bounds = range.bounds(total: Int(total)), body.count - start <= bounds.count,
                body.count > start || bounds.isEmpty
            else {
                throw CachetClientError(
                    code: .protocolViolation,
                    message: "a GET of range \(range) was answered \(body.count) bytes, which do not hold the value's "
                        + "length and that range's bytes",
                    node: node
                )
            }
            return CachetValueSlice(
                bytes: Array(body[start...]),
                totalLength: Int(total),
                offset: bounds.lowerBound,
                tag: tag
            )
        case .notFound:
            return nil
        case .rangeNotSatisfiable:
            let total = CachetValueRange.decodeReply(body).map { "\($0.total)" } ?? "unknown"
            throw CachetClientError(
                code: .rangeNotSatisfiable,
                message: "range \(range) starts past the end of the value under the key (\(total) bytes)",
                node: node
            )
        default:
            throw statusError(status, body: body, opcode: .get, node: node)
        }
    }
}
