import CachetIO
import CachetWire

/// A request as the client issues it: the opcode and borrowed bytes, encoded straight into a
/// connection's output buffer (no intermediate copy). See `Protocol/PROTOCOL.md`, "Request bodies".
struct ClientRequest {
    var opcode: CachetOpcode
    var key: UnsafeRawBufferPointer
    var value: UnsafeRawBufferPointer
    var ttl: UInt32
    /// The header's flags word: 0, or `lease` for read-through (`Protocol/PROTOCOL.md`, "Leases").
    var flags: UInt16 = 0
    /// A PUT's lease token, written before its body when `flags` has `lease`.
    var token: UInt64 = 0

    static func put(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, ttl: UInt32) -> ClientRequest {
        ClientRequest(opcode: .put, key: key, value: value, ttl: ttl)
    }

    static func keyed(_ opcode: CachetOpcode, key: UnsafeRawBufferPointer) -> ClientRequest {
        ClientRequest(opcode: opcode, key: key, value: UnsafeRawBufferPointer(start: nil, count: 0), ttl: 0)
    }

    /// A request whose whole body is `body` (a CLEAR naming key prefixes).
    static func withBody(_ opcode: CachetOpcode, body: UnsafeRawBufferPointer) -> ClientRequest {
        ClientRequest(opcode: opcode, key: UnsafeRawBufferPointer(start: nil, count: 0), value: body, ttl: 0)
    }

    static func bare(_ opcode: CachetOpcode) -> ClientRequest {
        let empty = UnsafeRawBufferPointer(start: nil, count: 0)
        return ClientRequest(opcode: opcode, key: empty, value: empty, ttl: 0)
    }

    /// Bytes of the whole frame.
    var frameLength: Int {
        switch opcode {
        case .put:
            return CachetProtocol.frameOverhead + CachetProtocol.putBodyPrefixSize + key.count + value.count
                + (flags & CachetRequestFlags.lease.rawValue != 0 ? 8 : 0)
        case .get, .delete:
            // A GET of a range carries its 16 range bytes as `value`, after the key.
            return CachetProtocol.frameOverhead + CachetProtocol.keyBodyPrefixSize + key.count + value.count
        default: return CachetProtocol.frameOverhead + key.count + value.count
        }
    }

    /// Appends the request frame with id `id` to `output`, written in place.
    func encode(id: UInt32, to output: inout CachetByteBuffer) {
        let length = frameLength
        output.reserveWritable(length)
        let base = output.writePointer
        CachetFrameEncoder.writePrefixAndHeader(
            to: base,
            bodyLength: length - CachetProtocol.frameOverhead,
            header: CachetFrameHeader(opcode: opcode, word: flags, id: id)
        )
        var offset = CachetProtocol.frameOverhead
        switch opcode {
        case .put:
            if flags & CachetRequestFlags.lease.rawValue != 0 {
                base.storeBytes(of: token.bigEndian, toByteOffset: offset, as: UInt64.self)
                offset += 8
            }
            base.storeBytes(of: ttl.bigEndian, toByteOffset: offset, as: UInt32.self)
            base.storeBytes(of: UInt16(key.count).bigEndian, toByteOffset: offset + 4, as: UInt16.self)
            offset += 6
        case .get, .delete:
            base.storeBytes(of: UInt16(key.count).bigEndian, toByteOffset: offset, as: UInt16.self)
            offset += 2
        default:
            break
        }
        if key.count > 0 {
            (base + offset).copyMemory(from: key.baseAddress!, byteCount: key.count)
            offset += key.count
        }
        if value.count > 0 {
            (base + offset).copyMemory(from: value.baseAddress!, byteCount: value.count)
            offset += value.count
        }
        output.moveWriteIndex(forwardBy: offset)
    }

    /// Checks a key before anything is sent.
    /// - Throws: ``CachetClientError`` `badRequest` for an empty key, `tooLarge` for one over 4096 bytes.
    static func validate(key: UnsafeRawBufferPointer) throws(CachetClientError) {
        guard key.count > 0 else {
            throw CachetClientError(code: .badRequest, message: "empty key: keys are 1 to 4096 bytes")
        }
        guard key.count <= CachetProtocol.maximumKeyLength else {
            throw CachetClientError(
                code: .tooLarge,
                message: "key of \(key.count) bytes exceeds the 4096-byte limit: shorten or hash it"
            )
        }
    }

    /// Checks a PUT before anything is sent.
    /// - Throws: ``CachetClientError`` as ``validate(key:)``, and `tooLarge` for a frame above
    ///   `maximumFrameLength`.
    static func validatePut(
        key: UnsafeRawBufferPointer,
        valueCount: Int,
        maximumFrameLength: Int
    ) throws(CachetClientError) {
        try validate(key: key)
        let payload = CachetProtocol.headerSize + CachetProtocol.putBodyPrefixSize + key.count + valueCount
        guard payload <= maximumFrameLength else {
            let limit = maximumFrameLength - CachetProtocol.headerSize - CachetProtocol.putBodyPrefixSize - key.count
            throw CachetClientError(
                code: .tooLarge,
                message: "value of \(valueCount) bytes exceeds the largest this key allows (\(limit) bytes "
                    + "under a \(maximumFrameLength)-byte frame limit): split it or raise --max-frame and "
                    + "Configuration.maximumFrameLength"
            )
        }
    }

    /// A TTL in whole seconds as PUT carries it: nil means no expiry; a fraction of a second rounds up,
    /// so that an entry lives at least as long as asked; too long is held at the 32-bit limit.
    /// - Throws: ``CachetClientError`` `badRequest` for a TTL of zero or less (on the wire, 0 means no
    ///   expiry: pass nil for that).
    static func ttlSeconds(_ ttl: Duration?) throws(CachetClientError) -> UInt32 {
        guard let ttl else { return 0 }
        guard ttl > .zero else {
            throw CachetClientError(
                code: .badRequest,
                message: "TTL \(ttl) is not positive: give a positive duration, or nil for no expiry"
            )
        }
        let (seconds, attoseconds) = ttl.components
        let whole = seconds + (attoseconds > 0 ? 1 : 0)
        return UInt32(clamping: whole)
    }
}
