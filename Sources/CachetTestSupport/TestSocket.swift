import CachetIO
public import CachetWire
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Errors of the blocking test client.
public struct TestSocketError: Error, CustomStringConvertible {
    /// What failed.
    public var description: String

    /// An error saying what failed.
    /// - Parameter description: what failed.
    public init(description: String) { self.description = description }
}

/// A blocking TCP client for tests: connects to 127.0.0.1, sends bytes, reads replies with a timeout.
///
/// Built on CachetIO's ``CachetBlockingConnection``: the socket is non-blocking underneath and every wait is
/// bounded by the timeout, so a server that stops reading or answering fails the test rather than hanging it.
///
/// `@unchecked Sendable` so that a test may hand each socket to one worker thread; a socket is never used
/// by two threads at once.
public final class TestSocket: @unchecked Sendable {
    /// The socket descriptor; -1 once closed.
    public var fd: Int32 { connection.fd }
    private let connection: CachetBlockingConnection
    private var timeout: Duration

    /// Connects to `host:port`.
    /// - Parameters:
    ///   - host: an IPv4 address.
    ///   - port: the TCP port.
    ///   - timeout: seconds a connect, a read, or a send into a full socket may block before failing.
    /// - Throws: ``TestSocketError`` when the connection fails.
    public init(host: String = "127.0.0.1", port: Int, timeout: Double = 10) throws {
        self.timeout = .seconds(timeout)
        do {
            connection = try CachetBlockingConnection(
                to: CachetAddress(host: host, port: port),
                timeout: .seconds(timeout)
            )
        } catch {
            throw TestSocketError(description: "connect to \(host):\(port): \(error.message)")
        }
    }

    /// Sets how long a read, or a send into a full socket, may block, so that a server that stops reading
    /// or answering fails the test rather than hanging it.
    /// - Parameter seconds: the timeout.
    public func setTimeout(_ seconds: Double) { timeout = .seconds(seconds) }

    /// Sets the kernel receive buffer size (before connecting traffic starts).
    /// - Parameter bytes: the requested size.
    public func setReceiveBuffer(_ bytes: Int32) { CachetSocket.setReceiveBufferSize(fd, bytes) }

    /// Sends every byte.
    /// - Parameter bytes: what to send.
    /// - Throws: ``TestSocketError`` when the peer is gone, or has taken nothing for the timeout.
    public func send(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let result = bytes.withUnsafeBytes { raw in
                CachetSocket.send(fd, UnsafeRawBufferPointer(rebasing: raw[sent...]))
            }
            switch result {
            case .bytes(let count):
                sent += count
            case .wouldBlock:
                // The timeout runs from the last progress, as a send timeout on a blocking socket would.
                guard CachetSocket.wait(fd, for: Int16(POLLOUT), until: CachetDeadline(after: timeout)) else {
                    throw TestSocketError(description: "send timed out with \(bytes.count - sent) bytes unsent")
                }
            case .endOfStream:
                throw TestSocketError(description: "send: errno \(EPIPE)")
            case .failed(let code):
                throw TestSocketError(description: "send: errno \(code)")
            }
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
            let region = connection.input.readableRegion
            let frame: CachetFrame?
            do {
                frame = try CachetReplyDecoder.decodeReply(in: region, maximumPayloadLength: Int(UInt32.max))
            } catch {
                throw TestSocketError(description: "invalid reply: \(error.message)")
            }
            if let frame {
                let response = CachetResponse(frame: frame, in: region)
                connection.input.moveReadIndex(forwardBy: frame.end)
                return response
            }
            guard try fill() else {
                throw TestSocketError(
                    description: "connection closed with \(connection.input.readableBytes) bytes of a partial reply"
                )
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
        while connection.input.readableBytes < count {
            guard try fill() else {
                throw TestSocketError(
                    description: "connection closed after \(connection.input.readableBytes) of \(count) bytes"
                )
            }
        }
        let result = Array(connection.input.readableRegion.prefix(count))
        connection.input.moveReadIndex(forwardBy: count)
        return result
    }

    /// Reads up to and including the first `marker` (a line end, the blank line after an HTTP head).
    /// - Parameter marker: the bytes that end what is read.
    /// - Returns: the bytes, `marker` included.
    /// - Throws: ``TestSocketError`` on timeout, or a close before the marker.
    public func readThrough(_ marker: [UInt8]) throws -> [UInt8] {
        var searched = 0
        while true {
            let region = connection.input.readableRegion
            if region.count >= marker.count {
                for start in max(0, searched - marker.count)...(region.count - marker.count)
                where region[start..<(start + marker.count)].elementsEqual(marker) {
                    let result = Array(region.prefix(start + marker.count))
                    connection.input.moveReadIndex(forwardBy: result.count)
                    return result
                }
                searched = region.count
            }
            guard try fill() else {
                throw TestSocketError(description: "connection closed after \(region.count) bytes, before the marker")
            }
        }
    }

    /// Reads every byte until the peer closes the connection.
    /// - Returns: the bytes.
    /// - Throws: ``TestSocketError`` on timeout.
    public func readToClose() throws -> [UInt8] {
        while try fill() {}
        let result = Array(connection.input.readableRegion)
        connection.input.clear()
        return result
    }

    /// Waits for the peer to close the connection, discarding what arrives.
    /// - Returns: true when the peer closed (read returned 0 or a reset); false on timeout.
    public func waitForClose() -> Bool {
        while true {
            do {
                if try !fill() { return true }
                connection.input.clear()
            } catch {
                return false
            }
        }
    }

    /// Reads once into the buffer, waiting at most the timeout. Returns false at end of stream (or reset).
    private func fill() throws -> Bool {
        do {
            return try connection.receive(until: CachetDeadline(after: timeout)) > 0
        } catch {
            if error.code == .timedOut { throw TestSocketError(description: "read timed out") }
            throw TestSocketError(description: "recv: \(error.message)")
        }
    }

    /// Shuts down the connection and closes the descriptor.
    public func close() { connection.close() }

    deinit { close() }
}
