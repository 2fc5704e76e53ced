import CachetIO
import CachetStore
import CachetWire

// The reply frames every part of the node writes: written in place into a connection's output buffer.

@inline(__always)
func appendReply(
    opcode: CachetOpcode,
    status: CachetStatus,
    id: UInt32,
    body: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0),
    to output: inout CachetByteBuffer
) {
    output.reserveWritable(CachetProtocol.frameOverhead + body.count)
    CachetFrameEncoder.writePrefixAndHeader(
        to: output.writePointer,
        bodyLength: body.count,
        header: CachetFrameHeader(opcode: opcode, word: status.rawValue, id: id)
    )
    output.moveWriteIndex(forwardBy: CachetProtocol.frameOverhead)
    if body.count > 0 { output.append(body) }
}

/// A GET's OK reply with the `ttl` flag: the TTL the entry has left (4 bytes, big-endian seconds, 0 for
/// none) before the value (`Protocol/PROTOCOL.md`, "GET with the TTL left"); a peer's warm-up GET is
/// answered the same way.
func appendValueWithTTL(
    _ value: UnsafeRawBufferPointer,
    expiry: UInt32,
    id: UInt32,
    output: inout CachetByteBuffer,
    now: UInt32
) {
    let ttl = expiry == 0 ? 0 : expiry &- now
    appendGetReply(prefix: ttl.bigEndian, bytes: value, id: id, output: &output)
}

/// One frame of a GET's reply sent in several (`Protocol/PROTOCOL.md`, "GET of a value longer than a
/// frame"): `status` CONTINUES, or OK for the last; the first frame of a GET with the `ttl` flag starts with
/// the TTL left (`ttl`, seconds).
func appendValuePiece(
    _ bytes: UnsafeRawBufferPointer,
    status: CachetStatus,
    ttl: UInt32?,
    id: UInt32,
    output: inout CachetByteBuffer
) {
    if let ttl {
        appendGetReply(prefix: ttl.bigEndian, bytes: bytes, id: id, status: status, output: &output)
    } else {
        appendReply(opcode: .get, status: status, id: id, body: bytes, to: &output)
    }
}

/// A reply to a GET (OK unless `status` says otherwise) whose body is `prefix` (fixed-width fields,
/// already big-endian) then `bytes`.
private func appendGetReply<Prefix>(
    prefix: Prefix,
    bytes: UnsafeRawBufferPointer,
    id: UInt32,
    status: CachetStatus = .ok,
    output: inout CachetByteBuffer
) {
    let bodyLength = MemoryLayout<Prefix>.size + bytes.count
    output.reserveWritable(CachetProtocol.frameOverhead + bodyLength)
    CachetFrameEncoder.writePrefixAndHeader(
        to: output.writePointer,
        bodyLength: bodyLength,
        header: CachetFrameHeader(opcode: .get, word: status.rawValue, id: id)
    )
    output.moveWriteIndex(forwardBy: CachetProtocol.frameOverhead)
    withUnsafeBytes(of: prefix) { output.append($0) }
    if bytes.count > 0 { output.append(bytes) }
}

/// The reply to a GET of a range (`Protocol/PROTOCOL.md`, "GET of a range") of `value`: OK with the
/// value's length and the range's bytes, or RANGE_NOT_SATISFIABLE with the value's length when the range
/// starts past its end.
func appendRange(
    _ range: CachetValueRange,
    of value: UnsafeRawBufferPointer,
    id: UInt32,
    limit: Int,
    output: inout CachetByteBuffer
) {
    let tag = CachetValueTag.of(value)
    guard let bounds = range.bounds(total: value.count) else {
        appendRangeNotSatisfiable(total: value.count, tag: tag, id: id, output: &output)
        return
    }
    let cut = bounds.lowerBound..<min(bounds.upperBound, bounds.lowerBound + limit)
    appendRangeReply(
        total: value.count,
        tag: tag,
        bytes: UnsafeRawBufferPointer(rebasing: value[cut]),
        id: id,
        output: &output
    )
}

/// The OK reply to a GET of a range: the value's length and tag, then the bytes.
func appendRangeReply(
    total: Int,
    tag: UInt64,
    bytes: UnsafeRawBufferPointer,
    id: UInt32,
    output: inout CachetByteBuffer
) {
    appendGetReply(prefix: (UInt64(total).bigEndian, tag.bigEndian), bytes: bytes, id: id, output: &output)
}

/// RANGE_NOT_SATISFIABLE, with the value's length and tag.
func appendRangeNotSatisfiable(total: Int, tag: UInt64, id: UInt32, output: inout CachetByteBuffer) {
    withUnsafeBytes(of: (UInt64(total).bigEndian, tag.bigEndian)) {
        appendReply(opcode: .get, status: .rangeNotSatisfiable, id: id, body: $0, to: &output)
    }
}

func appendError(_ error: CachetWireError, opcode: CachetOpcode, id: UInt32, to output: inout CachetByteBuffer) {
    appendMessage(error.message, status: error.status, opcode: opcode, id: id, to: &output)
}

func appendMessage(
    _ message: String,
    status: CachetStatus,
    opcode: CachetOpcode,
    id: UInt32,
    to output: inout CachetByteBuffer
) {
    var message = message
    message.withUTF8 {
        appendReply(opcode: opcode, status: status, id: id, body: UnsafeRawBufferPointer($0), to: &output)
    }
}

/// The NOT_FOUND of a GET with the `lease` flag (`Protocol/PROTOCOL.md`, "Leases"): with the lease granted
/// to the caller, or, when another caller holds it, how long to wait; a plain NOT_FOUND when leases are off.
func appendLeaseMiss(_ grant: NodeLeases.Grant, id: UInt32, to output: inout CachetByteBuffer) {
    let reply: CachetLeaseReply
    switch grant {
    case .granted(let token): reply = CachetLeaseReply(token: token, waitMilliseconds: 0)
    case .held: reply = CachetLeaseReply(token: 0, waitMilliseconds: NodeLeases.waitMilliseconds)
    case .none:
        appendReply(opcode: .get, status: .notFound, id: id, to: &output)
        return
    }
    reply.encoded.withUnsafeBytes { appendReply(opcode: .get, status: .notFound, id: id, body: $0, to: &output) }
}

/// A CLEAR's OK reply: how many entries and bytes it removed.
func appendClearReply(id: UInt32, items: Int, bytes: Int, to output: inout CachetByteBuffer) {
    let body = CachetClearResult(items: UInt64(items), bytes: UInt64(bytes)).encoded
    body.withUnsafeBytes { appendReply(opcode: .clear, status: .ok, id: id, body: $0, to: &output) }
}

/// An item as a GET with the `item` flag, or a get-and-touch, is answered (`Protocol/PROTOCOL.md`, "Items:
/// flags, CAS and conditional writes"): OK with the flags and the CAS unique before the value.
func appendItem(
    _ value: UnsafeRawBufferPointer,
    flags: UInt32,
    cas: UInt64,
    ttlLeft: UInt32? = nil,
    state: CachetItemWrite.MetaState? = nil,
    idleSeconds: UInt32? = nil,
    opcode: CachetOpcode,
    id: UInt32,
    output: inout CachetByteBuffer
) {
    let bodyLength =
        CachetItemWrite.itemReplyPrefixSize + (ttlLeft == nil ? 0 : 4) + (state == nil ? 0 : 1)
        + (idleSeconds == nil ? 0 : 4) + value.count
    output.reserveWritable(CachetProtocol.frameOverhead + bodyLength)
    CachetFrameEncoder.writePrefixAndHeader(
        to: output.writePointer,
        bodyLength: bodyLength,
        header: CachetFrameHeader(opcode: opcode, word: CachetStatus.ok.rawValue, id: id)
    )
    output.moveWriteIndex(forwardBy: CachetProtocol.frameOverhead)
    withUnsafeBytes(of: flags.bigEndian) { output.append($0) }
    withUnsafeBytes(of: cas.bigEndian) { output.append($0) }
    if let ttlLeft { withUnsafeBytes(of: ttlLeft.bigEndian) { output.append($0) } }
    if let state { withUnsafeBytes(of: state.rawValue) { output.append($0) } }
    if let idleSeconds { withUnsafeBytes(of: idleSeconds.bigEndian) { output.append($0) } }
    if value.count > 0 { output.append(value) }
}

/// The reply to a PUT with the `item` flag.
func appendItemReply(_ reply: ItemReply, id: UInt32, output: inout CachetByteBuffer) {
    switch reply {
    case .stored(let cas), .storedStale(let cas):
        withUnsafeBytes(of: cas.bigEndian) { appendReply(opcode: .put, status: .ok, id: id, body: $0, to: &output) }
    case .storedLength(let cas, let length):
        withUnsafeBytes(of: (cas.bigEndian, UInt64(length).bigEndian)) {
            appendReply(opcode: .put, status: .ok, id: id, body: $0, to: &output)
        }
    case .metaItem(let flags, let cas, let ttl, let state, let idle, let value):
        value.withUnsafeBytes {
            appendItem(
                $0,
                flags: flags,
                cas: cas,
                ttlLeft: ttl,
                state: state,
                idleSeconds: idle,
                opcode: .put,
                id: id,
                output: &output
            )
        }
    case .number(let cas, let value):
        withUnsafeBytes(of: (cas.bigEndian, value.bigEndian)) {
            appendReply(opcode: .put, status: .ok, id: id, body: $0, to: &output)
        }
    case .item(let flags, let cas, let value):
        value.withUnsafeBytes { appendItem($0, flags: flags, cas: cas, opcode: .put, id: id, output: &output) }
    case .refused(let status, let message):
        appendMessage(message, status: status, opcode: .put, id: id, to: &output)
    }
}
