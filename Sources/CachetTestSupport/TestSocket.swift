public import CachetWire
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Errors of the blocking test client.
public struct TestSocketError: Error, CustomStringConvertible {
    /// What failed.
    public var description: String
}

/// A blocking TCP client for tests: connects to 127.0.0.1, sends bytes, reads replies with a timeout.
///
/// `@unchecked Sendable` so that a test may hand each socket to one worker thread; a socket is never used
/// by two threads at once.
public final class TestSocket: @unchecked Sendable {
    /// The socket descriptor; -1 once closed.
    public private(set) var fd: Int32
    private var buffer: [UInt8] = []

    /// Connects to `host:port`.
    /// - Parameters:
    ///   - host: an IPv4 address.
    ///   - port: the TCP port.
    ///   - timeout: seconds a read may block before failing.
    /// - Throws: ``TestSocketError`` when the connection fails.
    public init(host: String = "127.0.0.1", port: Int, timeout: Double = 10) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSocketError(description: "socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host, &address.sin_addr)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            fd = -1
            throw TestSocketError(description: "connect to \(host):\(port): errno \(code)")
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        setTimeout(timeout)
    }

    /// Sets how long a read, or a send into a full socket, may block, so that a server that stops reading
    /// or answering fails the test rather than hanging it.
    /// - Parameter seconds: the timeout.
    public func setTimeout(_ seconds: Double) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Sets the kernel receive buffer size (before connecting traffic starts).
    /// - Parameter bytes: the requested size.
    public func setReceiveBuffer(_ bytes: Int32) {
        var size = bytes
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Sends every byte.
    /// - Parameter bytes: what to send.
    /// - Throws: ``TestSocketError`` when the peer is gone, or has taken nothing for the timeout.
    public func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
            }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK {
                    throw TestSocketError(description: "send timed out with \(bytes.count - sent) bytes unsent")
                }
                throw TestSocketError(description: "send: errno \(errno)")
            }
            sent += n
        }
    }

    /// Sends a command as a request frame.
    /// - Parameters:
    ///   - command: the command.
    ///   - id: the request id.
    /// - Throws: ``TestSocketError`` when the peer is gone.
    public func send(_ command: CachetCommand, id: UInt32) throws {
        try send(command.encoded(id: id))
    }

    /// Reads one response frame.
    /// - Returns: the response.
    /// - Throws: ``TestSocketError`` on timeout or when the peer closed first.
    public func readResponse() throws -> CachetResponse {
        while true {
            let decoded = try buffer.withUnsafeBytes { try CachetResponse.decode(from: $0) }
            if let (response, end) = decoded {
                buffer.removeFirst(end)
                return response
            }
            guard try fill() else {
                throw TestSocketError(description: "connection closed with \(buffer.count) bytes of a partial reply")
            }
        }
    }

    /// Sends a command and reads its response.
    /// - Parameters:
    ///   - command: the command.
    ///   - id: the request id.
    /// - Returns: the response.
    /// - Throws: ``TestSocketError``.
    public func roundTrip(_ command: CachetCommand, id: UInt32 = 1) throws -> CachetResponse {
        try send(command, id: id)
        return try readResponse()
    }

    /// Reads exactly `count` bytes.
    /// - Parameter count: bytes to read.
    /// - Returns: the bytes.
    /// - Throws: ``TestSocketError`` on timeout or close.
    public func readBytes(_ count: Int) throws -> [UInt8] {
        while buffer.count < count {
            guard try fill() else {
                throw TestSocketError(description: "connection closed after \(buffer.count) of \(count) bytes")
            }
        }
        let result = Array(buffer.prefix(count))
        buffer.removeFirst(count)
        return result
    }

    /// Waits for the peer to close the connection, discarding what arrives.
    /// - Returns: true when the peer closed (read returned 0 or a reset); false on timeout.
    public func waitForClose() -> Bool {
        while true {
            do {
                if try !fill() { return true }
            } catch {
                return false
            }
        }
    }

    /// Reads once into the buffer. Returns false at end of stream.
    private func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            if n > 0 {
                buffer.append(contentsOf: chunk[0..<n])
                return true
            }
            if n == 0 { return false }
            if errno == EINTR { continue }
            if errno == ECONNRESET { return false }
            if errno == EAGAIN || errno == EWOULDBLOCK { throw TestSocketError(description: "read timed out") }
            throw TestSocketError(description: "recv: errno \(errno)")
        }
    }

    /// Shuts down the connection and closes the descriptor.
    public func close() {
        if fd >= 0 {
            Glibc.close(fd)
            fd = -1
        }
    }

    deinit { close() }
}
