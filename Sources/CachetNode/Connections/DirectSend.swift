import CachetIO
import CachetWire

/// Writes a header and a body to a connection's socket with one non-blocking `writev`, so that a large
/// value goes from the store's memory to the kernel without a copy into the output buffer.
struct DirectSend {
    /// The connection's channel, unretained (a retain and release per request otherwise): a `DirectSend`
    /// lives only for the call that processes the connection's input, which the connection outlives.
    let channel: Unmanaged<Connection>

    init(channel: Connection) {
        self.channel = .passUnretained(channel)
    }

    /// The connection's memcached session, when it speaks memcached's protocol: a hit of its `get` goes out
    /// as a VALUE line and data (``MemcacheSession/sendValue(_:flags:cas:output:send:)``), never as a native
    /// reply. Read only for values large enough to be sent directly, so a native GET pays nothing for it.
    var memcache: MemcacheSession? { channel._withUnsafeGuaranteedRef { $0.memcache } }

    /// Returns the bytes the socket took: 0 when it takes none now, or on an error (which the next flush
    /// reports).
    func callAsFunction(_ header: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) -> Int {
        if case .bytes(let count) = channel._withUnsafeGuaranteedRef({ $0.transmit(header, body) }) { return count }
        return 0
    }

    /// Sends `head` then `body` straight to the socket in one `writev`, and queues in `output` whatever the
    /// socket did not take. Only while `output` is empty, so that bytes keep their order.
    @inline(__always)
    func send(
        _ head: UnsafeRawBufferPointer,
        _ body: UnsafeRawBufferPointer,
        queueingTheRestIn output: inout CachetByteBuffer
    ) {
        guard head.count + body.count > 0 else { return }
        let sent = max(0, self(head, body))
        if sent < head.count {
            output.append(UnsafeRawBufferPointer(rebasing: head[sent...]))
            output.append(body)
        } else {
            output.append(UnsafeRawBufferPointer(rebasing: body[(sent - head.count)...]))
        }
    }

    /// Sends a GET reply's header and value straight to the socket (under the shard's lock, with a
    /// non-blocking `writev`), then queues whatever the socket did not take. Only used while the output
    /// buffer is empty, so replies stay in order.
    func sendReply(id: UInt32, value: UnsafeRawBufferPointer, output: inout CachetByteBuffer) {
        sendReply(id: id, prefix: (), value: value, output: &output)
    }

    /// Sends an OK GET reply whose body is `prefix`'s bytes then `value` (a range's length and tag, then
    /// its bytes) as ``sendReply(id:value:output:)`` does: what the socket does not take now is queued.
    /// Generic so that a GET's empty prefix costs nothing.
    @inline(__always)
    func sendReply<Prefix>(id: UInt32, prefix: Prefix, value: UnsafeRawBufferPointer, output: inout CachetByteBuffer) {
        let headerLength = CachetProtocol.frameOverhead + MemoryLayout<Prefix>.size
        withUnsafeTemporaryAllocation(byteCount: headerLength, alignment: 4) { header in
            CachetFrameEncoder.writePrefixAndHeader(
                to: header.baseAddress!,
                bodyLength: MemoryLayout<Prefix>.size + value.count,
                header: CachetFrameHeader(opcode: .get, word: CachetStatus.ok.rawValue, id: id)
            )
            if MemoryLayout<Prefix>.size > 0 {
                withUnsafeBytes(of: prefix) {
                    (header.baseAddress! + CachetProtocol.frameOverhead).copyMemory(
                        from: $0.baseAddress!,
                        byteCount: $0.count
                    )
                }
            }
            send(UnsafeRawBufferPointer(header), value, queueingTheRestIn: &output)
        }
    }
}
