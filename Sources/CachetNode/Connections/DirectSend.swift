import CachetIO

/// Writes a header and a body to a connection's socket with one non-blocking `writev`, so that a large
/// value goes from the store's memory to the kernel without a copy into the output buffer.
struct DirectSend {
    /// The connection's channel, unretained (a retain and release per request otherwise): a `DirectSend`
    /// lives only for the call that processes the connection's input, which the connection outlives.
    let channel: Unmanaged<CachetChannel>

    init(channel: CachetChannel) {
        self.channel = .passUnretained(channel)
    }

    /// Returns the bytes the socket took: 0 when it takes none now, or on an error (which the next flush
    /// reports).
    func callAsFunction(_ header: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) -> Int {
        if case .bytes(let count) = channel._withUnsafeGuaranteedRef({ $0.transmit(header, body) }) { return count }
        return 0
    }
}
