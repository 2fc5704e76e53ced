import CachetIO
import CachetStore
import CachetWire

/// Large PUTs received in place: the value of a PUT frame read straight into its entry as it arrives.
extension RequestProcessor {

    /// Starts receiving a partial PUT frame's value straight into a new entry, when the frame is a valid
    /// PUT whose header and key have arrived, the node has no disk tier (which copies every write), and the
    /// entry fits the memory limit. Anything else (including every error) returns nil and takes the normal
    /// path once the whole frame is buffered, so replies and their order do not change.
    func startDirectPut(
        in buffer: UnsafeRawBufferPointer,
        at offset: Int,
        payloadLength: Int,
        now: UInt32
    ) -> DirectPut? {
        guard disk == nil, payloadLength <= maximumPayloadLength else { return nil }
        let start = offset + CachetProtocol.lengthPrefixSize
        let bodyStart = start + CachetProtocol.headerSize
        guard buffer.count >= bodyStart + CachetProtocol.putBodyPrefixSize,
            let header = CachetFrameDecoder.decodeHeader(in: buffer, at: offset),
            header.opcode == .put, header.flags & CachetRequestFlags.lease.rawValue == 0,
            (try? CachetFrameDecoder.validateRequestHeader(header)) != nil,
            let put = try? CachetBodyDecoder.decodePut(in: buffer, body: bodyStart..<(start + payloadLength)),
            put.key.upperBound <= buffer.count,
            connectionMemory.allows(put.value.count),
            cluster?.router.foreignOwner(of: UnsafeRawBufferPointer(rebasing: buffer[put.key])) == nil
        else { return nil }
        let key = UnsafeRawBufferPointer(rebasing: buffer[put.key])
        leases.invalidate(key)
        guard
            let pending = store.reservePut(
                key: key,
                valueLength: put.value.count,
                expiry: Self.expiry(ttl: put.ttl, now: now)
            )
        else { return nil }
        let buffered = UnsafeRawBufferPointer(rebasing: buffer[put.value.lowerBound..<buffer.count])
        if buffered.count > 0 {
            pending.value.baseAddress!.copyMemory(from: buffered.baseAddress!, byteCount: buffered.count)
        }
        return DirectPut(
            pending: pending,
            id: header.id,
            ttl: put.ttl,
            received: buffered.count,
            budget: connectionMemory
        )
    }

    /// Stores a PUT received in place and answers it.
    func completeDirectPut(_ put: DirectPut, output: inout CachetByteBuffer, now: UInt32) {
        RequestCounters.bump(counters.puts)
        watches.publish(
            .put,
            key: put.pending.key,
            value: UnsafeRawBufferPointer(put.pending.value),
            ttl: put.ttl,
            view: watchView
        )
        store.commit(put.pending, now: now)
        appendReply(opcode: .put, status: .ok, id: put.id, to: &output)
    }
}
