#if canImport(Glibc)
import Glibc
#endif

/// A connection for a thread that blocks: connect, send and receive each wait at most until a deadline.
/// For tools and tests (cachet-cli, the test support); servers and clients use ``CachetEventLoop``.
///
/// The socket stays non-blocking and every wait is a `poll` bounded by the deadline, so no call waits
/// longer than asked whatever the peer does. Used from one thread at a time.
public final class CachetBlockingConnection {
    /// The address connected to.
    public let address: CachetAddress
    /// The socket, -1 once closed.
    public private(set) var fd: Int32
    /// Bytes received and not yet consumed (move its read index when done with them).
    public var input = CachetByteBuffer(capacity: 64 << 10)

    /// Connects, waiting at most `timeout`.
    /// - Parameters:
    ///   - address: where to connect.
    ///   - timeout: the time allowed for resolving and connecting.
    /// - Throws: ``CachetIOError`` `invalidAddress`, `resolutionFailed`, `connectionRefused`, `timedOut` or
    ///   `connectionFailed`.
    public init(to address: CachetAddress, timeout: Duration) throws(CachetIOError) {
        self.address = address
        fd = try CachetSocket.connect(to: address, timeout: timeout, blocking: false)
    }

    /// The connection's TLS session; nil for a plain connection.
    public private(set) var tls: CachetTLSSession?

    /// The socket as bytes cross it (``CachetStream``: plain, or through ``tls``).
    var stream: CachetStream { CachetStream(fd: fd, tls: tls) }

    /// Connects and completes a TLS handshake, waiting at most `timeout` for both.
    /// - Parameters:
    ///   - address: where to connect.
    ///   - timeout: the time allowed for resolving, connecting and the handshake.
    ///   - tls: a client context (its CA, its certificate if the server asks for one, the server's name).
    /// - Throws: ``CachetIOError`` as ``init(to:timeout:)``, or `tlsHandshakeFailed` with OpenSSL's reason
    ///   (a certificate that does not verify, a server that does not speak TLS) or when it takes too long.
    public convenience init(to address: CachetAddress, timeout: Duration, tls context: CachetTLSContext)
        throws(CachetIOError)
    {
        let deadline = CachetDeadline(after: timeout)
        try self.init(to: address, timeout: timeout)
        let session = try context.session(for: fd)
        tls = session
        do throws(CachetIOError) {
            try session.completeHandshake(fd: fd, until: deadline, peer: "\(address)")
        } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    /// Whether the connection is open.
    public var isOpen: Bool { fd >= 0 }

    /// Closes the socket.
    public func close() {
        tls?.close()
        tls = nil
        if fd >= 0 {
            CachetSocket.close(fd)
            fd = -1
        }
    }

    /// Sends every byte, waiting for room until `deadline`.
    /// - Parameters:
    ///   - bytes: what to send.
    ///   - deadline: when to give up.
    /// - Throws: ``CachetIOError`` `timedOut` (with how many bytes were left) or `connectionClosed`.
    public func send(_ bytes: UnsafeRawBufferPointer, until deadline: CachetDeadline) throws(CachetIOError) {
        var sent = 0
        while sent < bytes.count {
            guard fd >= 0 else { throw closedError("the connection is closed") }
            let rest = UnsafeRawBufferPointer(rebasing: bytes[sent...])
            switch stream.write(rest) {
            case .bytes(let count):
                sent += count
            case .wouldBlock:
                guard CachetSocket.wait(fd, for: stream.writeWaitEvents, until: deadline) else {
                    throw CachetIOError(
                        code: .timedOut,
                        message:
                            "\(address) took no more bytes within \(deadline.timeout) (\(bytes.count - sent) unsent)",
                        systemError: ETIMEDOUT
                    )
                }
            case .endOfStream:
                throw closedError("the connection to \(address) broke while sending")
            case .failed(let code):
                throw closedError(
                    "the connection to \(address) broke while sending: \(CachetIOError.describe(code))",
                    code
                )
            }
        }
    }

    /// Sends every byte, waiting for room until `deadline`.
    /// - Parameters:
    ///   - bytes: what to send.
    ///   - deadline: when to give up.
    /// - Throws: ``CachetIOError`` `timedOut` or `connectionClosed`.
    public func send(_ bytes: [UInt8], until deadline: CachetDeadline) throws(CachetIOError) {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(CachetIOError) in try send(raw, until: deadline) }
        }
        try result.get()
    }

    /// Waits until bytes arrive (or `deadline`), and reads what is there into ``input``.
    /// - Parameter deadline: when to give up.
    /// - Returns: the bytes read, or 0 when the peer has closed its side (or reset the connection).
    /// - Throws: ``CachetIOError`` `timedOut` when nothing came in time, `connectionClosed` for other
    ///   failures.
    @discardableResult
    public func receive(until deadline: CachetDeadline) throws(CachetIOError) -> Int {
        while true {
            guard fd >= 0 else { throw closedError("the connection is closed") }
            input.reserveWritable(16 << 10)
            let room = input.writableBytes
            switch stream.read(into: input.writePointer, count: room) {
            case .bytes(let count):
                input.moveWriteIndex(forwardBy: count)
                return count
            case .endOfStream:
                return 0
            case .failed(let code):
                if code == ECONNRESET { return 0 }
                throw closedError("reading from \(address) failed: \(CachetIOError.describe(code))", code)
            case .wouldBlock:
                guard CachetSocket.wait(fd, for: stream.readWaitEvents, until: deadline) else {
                    throw CachetIOError(
                        code: .timedOut,
                        message: "nothing from \(address) within \(deadline.timeout)",
                        systemError: ETIMEDOUT
                    )
                }
            }
        }
    }

    private func closedError(_ message: String, _ code: Int32 = 0) -> CachetIOError {
        CachetIOError(code: .connectionClosed, message: message, systemError: code)
    }
}
