public import CachetWire

#if canImport(Glibc)
import Glibc
#endif

/// A blocking connection to one node, with a timeout on connect and on each reply.
///
/// Used from one thread; the CLI sends one request and waits for its reply.
public final class CachetCLIConnection {
    /// The node's address, as given.
    public let host: String
    /// The node's port.
    public let port: Int
    private var fd: Int32 = -1
    private let timeout: Double
    private var buffer: [UInt8] = []
    private var nextID: UInt32 = 1

    /// Connects to `host:port`.
    /// - Parameters:
    ///   - host: an IPv4 address or `localhost`.
    ///   - port: the TCP port.
    ///   - timeout: seconds allowed for the connection and for each reply.
    /// - Throws: ``CachetCLIError`` `connection` or `timeout` naming the address.
    public init(host: String, port: Int, timeout: Double) throws(CachetCLIError) {
        self.host = host
        self.port = port
        self.timeout = timeout
        try open()
    }

    deinit { close() }

    private func open() throws(CachetCLIError) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
        let numeric = host == "localhost" ? "127.0.0.1" : host
        guard inet_pton(AF_INET, numeric, &address.sin_addr) == 1 else {
            throw CachetCLIError(code: .connection, message: "'\(host)' is not an IPv4 address (such as 127.0.0.1)")
        }
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socketFD >= 0 else { throw failure("socket") }
        let flags = fcntl(socketFD, F_GETFL)
        _ = fcntl(socketFD, F_SETFL, flags | O_NONBLOCK)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socketFD, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if result != 0 && errno != EINPROGRESS {
            let error = failure("connect")
            Glibc.close(socketFD)
            throw error
        }
        if result != 0 {
            guard wait(socketFD, for: Int16(POLLOUT)) else {
                Glibc.close(socketFD)
                throw CachetCLIError(code: .timeout, message: "no answer from \(host):\(port) within \(timeout) s")
            }
            var code: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(socketFD, SOL_SOCKET, SO_ERROR, &code, &length)
            if code != 0 {
                Glibc.close(socketFD)
                throw CachetCLIError(
                    code: .connection,
                    message:
                        "cannot connect to \(host):\(port): \(String(cString: strerror(code))) (is cachet-node running?)"
                )
            }
        }
        var one: Int32 = 1
        setsockopt(socketFD, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        fd = socketFD
        buffer = []
    }

    private func failure(_ call: String) -> CachetCLIError {
        CachetCLIError(
            code: .connection,
            message: "\(call) to \(host):\(port) failed: \(String(cString: strerror(errno)))"
        )
    }

    private func wait(_ socketFD: Int32, for events: Int16) -> Bool {
        var pfd = pollfd(fd: socketFD, events: events, revents: 0)
        let ready = poll(&pfd, 1, Int32(timeout * 1000))
        return ready > 0
    }

    /// Closes the connection; the next request reconnects.
    public func close() {
        if fd >= 0 {
            Glibc.close(fd)
            fd = -1
        }
    }

    /// Sends `command` and waits for its reply, reconnecting first if the node had closed the connection.
    /// - Parameter command: the request.
    /// - Returns: the reply, and the exact bytes sent and received (for tracing).
    /// - Throws: ``CachetCLIError`` `connection`, `timeout` or `protocolViolation`.
    public func send(_ command: CachetCommand) throws(CachetCLIError) -> (
        response: CachetResponse, sent: [UInt8], received: [UInt8]
    ) {
        if fd < 0 { try open() }
        let id = nextID
        nextID &+= 1
        let request = command.encoded(id: id)
        do throws(CachetCLIError) {
            try write(request)
            let (response, raw) = try readResponse()
            guard response.id == id else {
                throw CachetCLIError(
                    code: .protocolViolation,
                    message: "reply id \(response.id) does not match request id \(id)"
                )
            }
            return (response, request, raw)
        } catch {
            close()
            throw error
        }
    }

    private func write(_ bytes: [UInt8]) throws(CachetCLIError) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL))
            }
            if n > 0 {
                sent += n
            } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                guard wait(fd, for: Int16(POLLOUT)) else {
                    throw CachetCLIError(
                        code: .timeout,
                        message: "\(host):\(port) did not take the request within \(timeout) s"
                    )
                }
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                throw CachetCLIError(
                    code: .connection,
                    message: "the connection to \(host):\(port) broke while sending"
                )
            }
        }
    }

    private func readResponse() throws(CachetCLIError) -> (CachetResponse, [UInt8]) {
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let result = buffer.withUnsafeBytes { buffer in
                Result { () throws(CachetWireError) in try CachetResponse.decode(from: buffer) }
            }
            let decoded: (response: CachetResponse, end: Int)?
            switch result {
            case .success(let value): decoded = value
            case .failure(let error):
                throw CachetCLIError(
                    code: .protocolViolation,
                    message: "invalid reply from \(host):\(port): \(error.message)"
                )
            }
            if let (response, end) = decoded {
                let raw = Array(buffer[0..<end])
                buffer.removeFirst(end)
                return (response, raw)
            }
            guard wait(fd, for: Int16(POLLIN)) else {
                throw CachetCLIError(code: .timeout, message: "no reply from \(host):\(port) within \(timeout) s")
            }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            if n > 0 {
                buffer.append(contentsOf: chunk[0..<n])
            } else if n < 0 && (errno == EINTR || errno == EAGAIN) {
                continue
            } else {
                throw CachetCLIError(code: .connection, message: "\(host):\(port) closed the connection")
            }
        }
    }
}
