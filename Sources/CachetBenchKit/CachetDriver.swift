import CachetWire

/// Cachet protocol v1: binary frames (`Protocol/PROTOCOL.md`). Requests carry id 0: replies come back in
/// order on a connection, and the opcode each echoes is checked against what was sent.
public struct CachetDriver: BenchProtocolDriver {
    /// Creates a driver.
    public init() {}

    /// Frame overhead, the PUT body prefix, the key and the value.
    public func requestLengthBound(keyLength: Int, valueLength: Int) -> Int {
        CachetProtocol.frameOverhead + CachetProtocol.putBodyPrefixSize + keyLength + valueLength
    }

    /// Writes a GET frame: `key_len` and the key.
    public func writeGet(key: UnsafeRawBufferPointer, to destination: UnsafeMutableRawPointer) -> Int {
        CachetFrameEncoder.writePrefixAndHeader(
            to: destination,
            bodyLength: CachetProtocol.keyBodyPrefixSize + key.count,
            header: CachetFrameHeader(opcode: .get, word: 0, id: 0)
        )
        destination.storeBytes(
            of: UInt16(truncatingIfNeeded: key.count).bigEndian,
            toByteOffset: CachetProtocol.frameOverhead,
            as: UInt16.self
        )
        return put(key, at: destination, CachetProtocol.frameOverhead + CachetProtocol.keyBodyPrefixSize)
    }

    /// Writes a PUT frame without TTL: `ttl` 0, `key_len`, the key and the value.
    public func writeSet(
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer,
        to destination: UnsafeMutableRawPointer
    ) -> Int {
        CachetFrameEncoder.writePrefixAndHeader(
            to: destination,
            bodyLength: CachetProtocol.putBodyPrefixSize + key.count + value.count,
            header: CachetFrameHeader(opcode: .put, word: 0, id: 0)
        )
        destination.storeBytes(of: UInt32(0), toByteOffset: CachetProtocol.frameOverhead, as: UInt32.self)
        destination.storeBytes(
            of: UInt16(truncatingIfNeeded: key.count).bigEndian,
            toByteOffset: CachetProtocol.frameOverhead + 4,
            as: UInt16.self
        )
        let offset = put(key, at: destination, CachetProtocol.frameOverhead + CachetProtocol.putBodyPrefixSize)
        return put(value, at: destination, offset)
    }

    /// Parses one reply frame: OK to a GET is a hit with the body's length, OK to a PUT is stored,
    /// NOT_FOUND is a miss, any other status an error reply.
    public func parseReply(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws(BenchError) -> (
        reply: BenchReply, end: Int
    )? {
        let found: CachetFrame?
        do {
            found = try CachetReplyDecoder.decodeValidReply(
                in: buffer,
                at: offset,
                maximumPayloadLength: Int(UInt32.max)
            )
        } catch {
            throw BenchError(.malformedReply, "invalid Cachet reply: \(error.message)")
        }
        guard let frame = found else { return nil }
        switch frame.header.status {
        case .ok:
            if frame.header.opcode == .get { return (.hit(length: frame.body.count), frame.end) }
            if frame.header.opcode == .put { return (.stored, frame.end) }
            throw BenchError(
                .malformedReply,
                "Cachet reply with opcode \(frame.header.opcode.rawValue) to a GET or PUT"
            )
        case .notFound:
            return (.miss, frame.end)
        default:
            return (.error, frame.end)
        }
    }
}
