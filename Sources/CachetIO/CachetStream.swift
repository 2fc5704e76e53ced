#if canImport(Glibc)
import Glibc
#endif

/// A connected socket as bytes cross it: plain TCP, or TLS over it (``CachetTLSSession``). The one place
/// that chooses between the two, for every reader and writer of a connection: ``CachetChannel`` on an event
/// loop, ``CachetSharedChannel``'s callers and ``CachetBlockingConnection``. Each call answers as a socket
/// call would (``CachetSocket/IOResult``); a stream holds no state of its own, so one is made for each call
/// at no cost.
public struct CachetStream {
    /// The socket.
    public let fd: Int32
    /// The TLS session on it; nil for plain TCP.
    public let tls: CachetTLSSession?

    /// A stream over `fd`, encrypted by `tls` when there is one.
    @inlinable
    public init(fd: Int32, tls: CachetTLSSession?) {
        self.fd = fd
        self.tls = tls
    }

    /// Reads once into `buffer` (retried on EINTR).
    /// - Parameters:
    ///   - buffer: where to read to.
    ///   - count: the room in `buffer`.
    /// - Returns: what happened.
    @inline(__always)
    public func read(into buffer: UnsafeMutableRawPointer, count: Int) -> CachetSocket.IOResult {
        if let tls { return tls.read(into: buffer, count: count) }
        return CachetSocket.read(fd, into: buffer, count: count)
    }

    /// Sends bytes once.
    /// - Parameter bytes: what to send.
    /// - Returns: what happened (`.bytes` may be fewer than offered).
    @inline(__always)
    public func write(_ bytes: UnsafeRawBufferPointer) -> CachetSocket.IOResult {
        if let tls { return tls.write(bytes) }
        return CachetSocket.send(fd, bytes)
    }

    /// Sends a header and a body in one call (`writev` on plain TCP; two TLS records, counted as one write).
    /// - Parameters:
    ///   - header: the first bytes.
    ///   - body: the bytes after them.
    /// - Returns: what happened (`.bytes` may be fewer than offered).
    @inline(__always)
    public func write(_ header: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) -> CachetSocket.IOResult {
        guard let tls else { return CachetSocket.send(fd, header, body) }
        return Self.writeRecords(tls, header, body)
    }

    /// A header and a body as two TLS records; the count spans both, as one `writev` would.
    private static func writeRecords(
        _ tls: CachetTLSSession,
        _ header: UnsafeRawBufferPointer,
        _ body: UnsafeRawBufferPointer
    ) -> CachetSocket.IOResult {
        let first = tls.write(header)
        guard case .bytes(let sent) = first, sent == header.count else { return first }
        switch tls.write(body) {
        case .bytes(let more): return .bytes(sent + more)
        case .wouldBlock, .endOfStream, .failed: return .bytes(sent)
        }
    }

    /// What to wait for (`poll`'s events) after a read answered `.wouldBlock`: a TLS session may need to
    /// write to read.
    public var readWaitEvents: Int16 { tls?.waitsFor ?? Int16(POLLIN) }

    /// What to wait for after a write answered `.wouldBlock`: a TLS session may need to read to write.
    public var writeWaitEvents: Int16 { tls?.waitsFor ?? Int16(POLLOUT) }

    /// Bytes received and not read yet: the kernel's, and with TLS the decrypted bytes OpenSSL holds.
    public var unreadBytes: Int { (tls?.pending ?? 0) + CachetSocket.unreadBytes(fd) }

    /// Ends the sending side (TLS's close-notify first); reading goes on.
    public func shutdownOutput() {
        tls?.close()
        CachetSocket.shutdownOutput(fd)
    }
}
