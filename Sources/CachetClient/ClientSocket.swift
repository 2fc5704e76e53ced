import CEpoll

#if canImport(Glibc)
import Glibc
#endif

/// The socket calls the client's connections make: resolve, open a non-blocking connect, check its
/// outcome, send, receive, close.
enum ClientSocket {
    /// A resolved address: the bytes of a `sockaddr_in` or `sockaddr_in6`.
    struct Address: Sendable {
        var family: Int32
        var storage: [UInt8]
    }

    /// Resolves `host` (an IPv4 or IPv6 literal, or a name) and `port`, preferring what the system lists
    /// first.
    static func resolve(host: String, port: Int) throws(CachetSystemError) -> Address {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG
        var result: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &result)
        guard status == 0, let first = result else {
            throw CachetSystemError(call: "getaddrinfo(\(host))", errno: status == EAI_SYSTEM ? errno : -status)
        }
        defer { freeaddrinfo(result) }
        let bytes = UnsafeRawBufferPointer(start: first.pointee.ai_addr, count: Int(first.pointee.ai_addrlen))
        return Address(family: first.pointee.ai_family, storage: Array(bytes))
    }

    /// Opens a non-blocking TCP socket and starts connecting it.
    /// - Returns: the descriptor, and whether the connect already completed.
    static func startConnect(to address: Address) throws(CachetSystemError) -> (fd: Int32, connected: Bool) {
        let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
            | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw CachetSystemError(call: "socket", errno: errno) }
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let result = address.storage.withUnsafeBytes { bytes in
            connect(fd, bytes.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(bytes.count))
        }
        if result == 0 { return (fd, true) }
        let error = errno
        if error == EINPROGRESS || error == EINTR { return (fd, false) }
        close(fd)
        throw CachetSystemError(call: "connect", errno: error)
    }

    /// The outcome of a connect once the socket turned writable: 0 or an `errno`.
    static func connectError(_ fd: Int32) -> Int32 {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 else { return errno }
        return error
    }

    /// Sends what it can without blocking.
    /// - Returns: bytes sent; 0 when the socket's buffer is full; -errno on an error.
    static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        while true {
            let sent = cachet_send(fd, bytes.baseAddress, UInt(bytes.count))
            if sent >= 0 { return sent }
            let error = errno
            if error == EINTR { continue }
            if error == EAGAIN || error == EWOULDBLOCK { return 0 }
            return -Int(error)
        }
    }

    /// Receives what is there without blocking.
    /// - Returns: bytes received; 0 at end of stream; nil when nothing is there; -errno on an error.
    static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        while true {
            let got = recv(fd, buffer.baseAddress, buffer.count, 0)
            if got >= 0 { return got }
            let error = errno
            if error == EINTR { continue }
            if error == EAGAIN || error == EWOULDBLOCK { return nil }
            return -Int(error)
        }
    }
}

/// The text of an `errno` value.
func systemErrorText(_ code: Int32) -> String {
    if code < 0 { return String(cString: gai_strerror(-code)) }
    return String(cString: strerror(code))
}

/// The monotonic clock in nanoseconds.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
}

extension Duration {
    /// Whole nanoseconds, held at `UInt64.max`.
    var nanoseconds: UInt64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0 else { return 0 }
        let (product, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : product &+ UInt64(attoseconds / 1_000_000_000)
    }
}
