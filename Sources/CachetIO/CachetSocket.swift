import CEpoll

#if canImport(Glibc)
import Glibc
#endif

/// Socket calls shared by every part of Cachet that opens a connection or listens: the only place that
/// builds a `sockaddr` for `connect` or `bind` (the node's listener included).
///
/// Every socket is close-on-exec; connected sockets have TCP_NODELAY; sends use MSG_NOSIGNAL, so a peer
/// that has gone away yields EPIPE instead of killing the process (``ignoreBrokenPipeSignal()`` covers
/// writes that do not go through these helpers).
public enum CachetSocket {
    /// Sets `TCP_NODELAY` on this process's listening TCP socket bound to `port`, which the connections it
    /// accepts inherit (on Linux): for a listener that a library made and keeps to itself.
    /// - Parameter port: the port it listens on.
    public static func setNoDelay(onListenerOf port: Int) {
        for fd in Int32(0)..<Int32(4096) {
            var listening: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0, listening == 1 else { continue }
            var address = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let named = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            let family = Int32(address.ss_family)
            guard named == 0, family == AF_INET || family == AF_INET6 else { continue }
            // The port is at the same offset of sockaddr_in and sockaddr_in6.
            let found = withUnsafeBytes(of: address) { $0.load(fromByteOffset: 2, as: UInt16.self).bigEndian }
            guard Int(found) == port else { continue }
            var on: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
        }
    }

    /// Ignores SIGPIPE for the whole process. Call once at start-up in programs that write to sockets or
    /// pipes other than through ``send(_:_:)``.
    public static func ignoreBrokenPipeSignal() { _ = signal(SIGPIPE, SIG_IGN) }

    // MARK: - Listening

    /// Opens a listening socket with SO_REUSEADDR, non-blocking and close-on-exec.
    /// - Parameters:
    ///   - address: where to listen; port 0 picks a free port.
    ///   - backlog: the accept queue's length.
    /// - Returns: the descriptor and the port it is bound to.
    /// - Throws: ``CachetIOError`` `invalidAddress`, `resolutionFailed` or `listenFailed`.
    public static func listen(on address: CachetAddress, backlog: Int32 = 1024) throws(CachetIOError) -> (
        fd: Int32, port: Int
    ) {
        let resolved = try address.resolve()[0]
        let fd = socket(resolved.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            throw CachetIOError(
                code: .listenFailed,
                message: "socket() failed: \(CachetIOError.describe(errno))",
                systemError: errno
            )
        }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound = resolved.withSockAddr { bind(fd, $0, $1) }
        guard bound == 0, Glibc.listen(fd, backlog) == 0 else {
            let code = errno
            _ = Glibc.close(fd)
            throw CachetIOError(
                code: .listenFailed,
                message: "cannot listen on \(address): \(CachetIOError.describe(code))"
                    + (code == EADDRINUSE ? " (another process holds the port; choose another)" : ""),
                systemError: code
            )
        }
        setNonBlocking(fd)
        let port = CachetSocketAddress.local(of: fd)?.port ?? address.port
        return (fd, port)
    }

    /// Accepts one connection, non-blocking and close-on-exec, with TCP_NODELAY.
    /// - Parameter listener: a listening socket.
    /// - Returns: the connection's descriptor, or nil when none is waiting (EAGAIN).
    /// - Throws: ``CachetIOError`` for other failures (`resourceExhausted` for EMFILE).
    public static func accept(_ listener: Int32) throws(CachetIOError) -> Int32? {
        while true {
            let fd = cachet_accept_nonblocking(listener)
            if fd >= 0 {
                setNoDelay(fd)
                return fd
            }
            let code = errno
            switch code {
            case EINTR, ECONNABORTED: continue
            case EAGAIN, EWOULDBLOCK: return nil
            case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                throw CachetIOError(
                    code: .resourceExhausted,
                    message: "accept failed: \(CachetIOError.describe(code))",
                    systemError: code
                )
            default:
                throw CachetIOError(
                    code: .connectionFailed,
                    message: "accept failed: \(CachetIOError.describe(code))",
                    systemError: code
                )
            }
        }
    }

    // MARK: - Connecting

    /// The first step of a non-blocking connect, for an event loop: a non-blocking, close-on-exec socket with
    /// TCP_NODELAY, and `connect` started.
    /// - Parameter address: where to connect.
    /// - Returns: the descriptor, and whether the connection is still in progress (EINPROGRESS); when it
    ///   is, the socket turns writable once it completes and SO_ERROR (``pendingError(_:)``) says how.
    /// - Throws: ``CachetIOError`` when the socket cannot be made or connect fails at once (refused...).
    public static func startConnect(to address: CachetSocketAddress) throws(CachetIOError) -> (
        fd: Int32, inProgress: Bool
    ) {
        let fd = socket(
            address.family,
            Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
            0
        )
        guard fd >= 0 else { throw CachetIOError.connectFailure(errno, address: address.description) }
        setNoDelay(fd)
        var result: Int32
        repeat {
            result = address.withSockAddr { Glibc.connect(fd, $0, $1) }
        } while result != 0 && errno == EINTR
        if result == 0 { return (fd, false) }
        let code = errno
        if code == EINPROGRESS { return (fd, true) }
        _ = Glibc.close(fd)
        throw CachetIOError.connectFailure(code, address: address.description)
    }

    /// The outcome of a non-blocking connect once the socket turned writable (or reported an error).
    /// - Parameter fd: the socket.
    /// - Returns: 0 when connected, otherwise the errno value.
    public static func pendingError(_ fd: Int32) -> Int32 {
        var code: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length) == 0 else { return errno }
        return code
    }

    /// Connects and waits at most `timeout`, trying each resolved address in turn; for tools and tests
    /// that block a thread.
    /// - Parameters:
    ///   - address: where to connect; names are resolved first.
    ///   - timeout: the time allowed for resolving and connecting, all addresses together.
    ///   - blocking: whether to leave the socket blocking (true) or non-blocking (false).
    /// - Returns: the connected descriptor, close-on-exec, with TCP_NODELAY.
    /// - Throws: ``CachetIOError`` `invalidAddress`, `resolutionFailed`, `connectionRefused`, `timedOut`
    ///   or `connectionFailed`, naming the address.
    public static func connect(
        to address: CachetAddress,
        timeout: Duration,
        blocking: Bool = true
    ) throws(CachetIOError) -> Int32 {
        try address.validate()
        let deadline = CachetDeadline(after: timeout)
        var lastError: CachetIOError?
        for resolved in try address.resolve() {
            do {
                let fd = try connect(to: resolved, deadline: deadline, name: address.description)
                if blocking { setBlocking(fd) }
                return fd
            } catch {
                lastError = error
                if error.code == .timedOut { break }
            }
        }
        throw lastError!
    }

    /// Connects to one resolved address, waiting until `deadline`; the socket is left non-blocking.
    static func connect(
        to address: CachetSocketAddress,
        deadline: CachetDeadline,
        name: String
    ) throws(CachetIOError) -> Int32 {
        let started = try startConnect(to: address)
        guard started.inProgress else { return started.fd }
        let ready = wait(started.fd, for: Int16(POLLOUT), until: deadline)
        if !ready {
            _ = Glibc.close(started.fd)
            throw CachetIOError(
                code: .timedOut,
                message: "cannot connect to \(name): no answer within \(deadline.timeout) (is the host up?)",
                systemError: ETIMEDOUT
            )
        }
        let code = pendingError(started.fd)
        guard code == 0 else {
            _ = Glibc.close(started.fd)
            throw CachetIOError.connectFailure(code, address: name)
        }
        return started.fd
    }

    /// Waits until `fd` reports `events` or the deadline passes.
    /// - Parameters:
    ///   - fd: the descriptor.
    ///   - events: POLLIN or POLLOUT.
    ///   - deadline: when to give up.
    /// - Returns: true when ready (or in error or hung up: the next call will say how), false on timeout.
    public static func wait(_ fd: Int32, for events: Int16, until deadline: CachetDeadline) -> Bool {
        while true {
            let remaining = deadline.remainingMilliseconds
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&pfd, 1, remaining)
            if ready > 0 { return true }
            if ready < 0 && errno == EINTR { continue }
            if ready == 0 && remaining > 0 && !deadline.hasPassed { continue }
            return false
        }
    }

    /// Waits until one of `fds` reports `events`, or `timeout` passes (one `poll`; EINTR counts as a
    /// timeout): for a tool that reads a few blocking connections on one thread.
    /// - Parameters:
    ///   - fds: the descriptors; negative ones are skipped.
    ///   - events: POLLIN or POLLOUT.
    ///   - timeout: the longest wait, rounded up to whole milliseconds.
    /// - Returns: the indexes in `fds` of those that are ready (or in error or hung up), in order; empty
    ///   when none is.
    public static func waitForAny(_ fds: [Int32], for events: Int16, timeout: Duration) -> [Int] {
        var polls = fds.map { pollfd(fd: $0, events: events, revents: 0) }
        let milliseconds = Int32(clamping: (max(0, timeout.nanosecondsClamped) + 999_999) / 1_000_000)
        guard poll(&polls, nfds_t(polls.count), milliseconds) > 0 else { return [] }
        return polls.indices.filter { polls[$0].revents != 0 }
    }

    // MARK: - Options

    /// Sets TCP_NODELAY (replies and requests go out at once).
    public static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Sets O_NONBLOCK.
    public static func setNonBlocking(_ fd: Int32) { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }

    /// Clears O_NONBLOCK.
    public static func setBlocking(_ fd: Int32) { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) }

    /// Sets the kernel receive buffer's size.
    public static func setReceiveBufferSize(_ fd: Int32, _ bytes: Int32) {
        var size = bytes
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
    }

    // MARK: - Reading and writing

    /// What one `read` or `send` did.
    public enum IOResult: Sendable, Equatable {
        /// This many bytes moved (more than 0).
        case bytes(Int)
        /// Nothing now (EAGAIN): wait for readiness.
        case wouldBlock
        /// The peer closed its side (a read of 0 bytes).
        case endOfStream
        /// The call failed with this errno value (ECONNRESET, EPIPE...).
        case failed(Int32)
    }

    /// One `read` into `buffer`, retried on EINTR.
    /// - Parameters:
    ///   - fd: the socket.
    ///   - buffer: where to read to.
    ///   - count: the room in `buffer`.
    /// - Returns: what happened.
    public static func read(_ fd: Int32, into buffer: UnsafeMutableRawPointer, count: Int) -> IOResult {
        while true {
            let n = Glibc.read(fd, buffer, count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .endOfStream }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
            return .failed(code)
        }
    }

    /// One `send` with MSG_NOSIGNAL, retried on EINTR.
    /// - Parameters:
    ///   - fd: the socket.
    ///   - bytes: what to send.
    /// - Returns: what happened (`.bytes` may be fewer than offered).
    public static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> IOResult {
        while true {
            let n = cachet_send(fd, bytes.baseAddress, UInt(bytes.count))
            if n > 0 { return .bytes(n) }
            let code = errno
            if n < 0 && code == EINTR { continue }
            if n < 0 && (code == EAGAIN || code == EWOULDBLOCK) { return .wouldBlock }
            return .failed(n == 0 ? EPIPE : code)
        }
    }

    /// One `writev` of a header and a body, retried on EINTR: a reply and its value in one call, with no
    /// copy of the value into an output buffer.
    /// - Parameters:
    ///   - fd: the socket.
    ///   - header: the first bytes.
    ///   - body: the bytes after them.
    /// - Returns: what happened (`.bytes` may be fewer than offered; SIGPIPE is ignored by the process).
    public static func send(_ fd: Int32, _ header: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) -> IOResult {
        withUnsafeTemporaryAllocation(of: iovec.self, capacity: 2) { vectors in
            vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(mutating: header.baseAddress), iov_len: header.count)
            vectors[1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress), iov_len: body.count)
            while true {
                let n = writev(fd, vectors.baseAddress, 2)
                if n > 0 { return .bytes(n) }
                let code = errno
                if n < 0 && code == EINTR { continue }
                if n < 0 && (code == EAGAIN || code == EWOULDBLOCK) { return .wouldBlock }
                return .failed(n == 0 ? EPIPE : code)
            }
        }
    }

    /// Ends the sending side of a connection (`shutdown(SHUT_WR)`: the peer reads the end of the stream
    /// after what was sent).
    /// - Parameter fd: the socket.
    /// - Returns: 0, or the errno value when the call failed (ENOTCONN: the connection is gone).
    @discardableResult
    public static func shutdownOutput(_ fd: Int32) -> Int32 {
        Glibc.shutdown(fd, Int32(SHUT_WR)) == 0 ? 0 : errno
    }

    /// Bytes the kernel holds for a socket that have not been read (`FIONREAD`); 0 when it cannot say.
    /// - Parameter fd: the socket.
    public static func unreadBytes(_ fd: Int32) -> Int {
        var count: Int32 = 0
        guard ioctl(fd, UInt(FIONREAD), &count) == 0 else { return 0 }
        return Int(count)
    }

    /// Closes a descriptor (not one a Dispatch source still watches).
    public static func close(_ fd: Int32) { _ = Glibc.close(fd) }
}

/// A point on the monotonic clock by which something must finish.
public struct CachetDeadline: Sendable, Hashable, Comparable {
    /// The monotonic time in nanoseconds.
    public var uptimeNanoseconds: UInt64
    /// The timeout it was made from, for messages.
    public var timeout: Duration

    /// A deadline `timeout` from now.
    /// - Parameter timeout: how long from now; negative counts as zero.
    public init(after timeout: Duration) {
        let nanoseconds = max(0, timeout.nanosecondsClamped)
        self.uptimeNanoseconds = CachetDeadline.now() &+ UInt64(nanoseconds)
        self.timeout = timeout
    }

    /// The monotonic clock in nanoseconds.
    public static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Whether the deadline has passed.
    public var hasPassed: Bool { CachetDeadline.now() >= uptimeNanoseconds }

    /// Milliseconds left, rounded up, 0 once passed (for poll).
    public var remainingMilliseconds: Int32 {
        let now = CachetDeadline.now()
        guard uptimeNanoseconds > now else { return 0 }
        return Int32(clamping: (uptimeNanoseconds - now + 999_999) / 1_000_000)
    }

    public static func < (lhs: CachetDeadline, rhs: CachetDeadline) -> Bool {
        lhs.uptimeNanoseconds < rhs.uptimeNanoseconds
    }
}

extension Duration {
    /// The duration in nanoseconds, clamped to Int64.
    public var nanosecondsClamped: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return scaled.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue
    }
}
