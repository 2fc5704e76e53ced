#if canImport(Glibc)
import Glibc
#endif

/// A server's address as a user writes it: a host (an IPv4 or IPv6 literal, or a name) and a TCP port.
///
/// Creating one checks nothing; ``validate(allowingPortZero:)`` checks the syntax, and ``resolve()`` turns it
/// into socket addresses (names through getaddrinfo). ``init(parsing:defaultPort:)`` reads `host:port`,
/// `[::1]:7420`, or a bare host when a default port is given.
public struct CachetAddress: Hashable, Sendable, CustomStringConvertible {
    /// The host: `127.0.0.1`, `::1` (without brackets) or a name such as `localhost`.
    public var host: String
    /// The TCP port.
    public var port: Int

    /// Creates an address without checking it.
    /// - Parameters:
    ///   - host: an IPv4 or IPv6 literal (IPv6 without brackets) or a host name.
    ///   - port: the TCP port.
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `host:port`, `[ipv6]:port`, or, when `defaultPort` is given, a bare host or IPv6 literal.
    /// - Parameters:
    ///   - text: the address as written.
    ///   - defaultPort: the port to use when `text` names none; nil makes the port required.
    /// - Throws: ``CachetIOError`` `invalidAddress` saying what is wrong with `text`.
    public init(parsing text: String, defaultPort: Int? = nil) throws(CachetIOError) {
        let trimmed = text.trimmingWhitespace()
        var host: Substring
        var portText: Substring?
        if trimmed.hasPrefix("[") {
            guard let close = trimmed.firstIndex(of: "]") else {
                throw Self.invalid(text, "an IPv6 address in brackets lacks its ']'")
            }
            host = trimmed[trimmed.index(after: trimmed.startIndex)..<close]
            let rest = trimmed[trimmed.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { throw Self.invalid(text, "expected ':port' after ']'") }
                portText = rest.dropFirst()
            }
            guard Self.isIPv6Literal(String(host)) else {
                throw Self.invalid(text, "'\(host)' in brackets is not an IPv6 address")
            }
        } else {
            let colons = trimmed.count(where: { $0 == ":" })
            if colons == 1 {
                let colon = trimmed.firstIndex(of: ":")!
                host = trimmed[..<colon]
                portText = trimmed[trimmed.index(after: colon)...]
            } else if colons > 1 {
                guard defaultPort != nil, Self.isIPv6Literal(String(trimmed)) else {
                    throw Self.invalid(text, "write an IPv6 address with a port in brackets, as [::1]:7420")
                }
                host = Substring(trimmed)
            } else {
                host = Substring(trimmed)
            }
        }
        let port: Int
        if let portText {
            guard let value = Int(portText), portText.allSatisfy(\.isASCII) else {
                throw Self.invalid(text, "port '\(portText)' is not a number")
            }
            port = value
        } else if let defaultPort {
            port = defaultPort
        } else {
            throw Self.invalid(text, "no port: write host:port, as 127.0.0.1:7420 or [::1]:7420")
        }
        self.init(host: String(host), port: port)
        try validate(allowingPortZero: true)
    }

    /// `host:port`, with an IPv6 literal in brackets.
    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Checks the port's range and the host's syntax, without resolving anything.
    /// - Parameter allowingPortZero: whether port 0 is allowed (to listen on an ephemeral port).
    /// - Throws: ``CachetIOError`` `invalidAddress` saying what is wrong.
    public func validate(allowingPortZero: Bool = false) throws(CachetIOError) {
        let lowest = allowingPortZero ? 0 : 1
        guard (lowest...65535).contains(port) else {
            throw CachetIOError(
                code: .invalidAddress,
                message: "port \(port) is out of range: use \(lowest) to 65535"
            )
        }
        guard Self.isValidHost(host) else {
            throw CachetIOError(
                code: .invalidAddress,
                message:
                    "'\(host)' is not a host: use an IPv4 address (127.0.0.1), an IPv6 address (::1) or a name (localhost)"
            )
        }
    }

    /// Resolves the address: literals directly, names through getaddrinfo. IPv4 addresses come first, so
    /// that `localhost` reaches a server listening on 127.0.0.1 at once.
    /// - Returns: at least one socket address.
    /// - Throws: ``CachetIOError`` `invalidAddress` or `resolutionFailed`.
    public func resolve() throws(CachetIOError) -> [CachetSocketAddress] {
        try validate(allowingPortZero: true)
        if let literal = CachetSocketAddress(literal: host, port: port) { return [literal] }
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let list else {
            let reason = status == EAI_SYSTEM ? CachetIOError.describe(errno) : String(cString: gai_strerror(status))
            throw CachetIOError(
                code: .resolutionFailed,
                message: "cannot resolve '\(host)': \(reason) (check the name, or give an IP address)"
            )
        }
        defer { freeaddrinfo(list) }
        var results: [CachetSocketAddress] = []
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let current = entry {
            if let raw = current.pointee.ai_addr,
                let address = CachetSocketAddress(raw, length: current.pointee.ai_addrlen),
                !results.contains(address)
            {
                results.append(address)
            }
            entry = current.pointee.ai_next
        }
        results.sort { $0.family == AF_INET && $1.family != AF_INET }
        guard !results.isEmpty else {
            throw CachetIOError(code: .resolutionFailed, message: "'\(host)' resolves to no IPv4 or IPv6 address")
        }
        return results
    }

    // MARK: - Syntax

    static func invalid(_ text: String, _ reason: String) -> CachetIOError {
        CachetIOError(code: .invalidAddress, message: "'\(text)' is not an address: \(reason)")
    }

    static func isIPv4Literal(_ text: String) -> Bool {
        var address = in_addr()
        return inet_pton(AF_INET, text, &address) == 1
    }

    static func isIPv6Literal(_ text: String) -> Bool {
        var address = in6_addr()
        return inet_pton(AF_INET6, text, &address) == 1
    }

    /// An IP literal, or a host name of letters, digits, hyphens and underscores in dot-separated labels
    /// of at most 63 bytes (253 in all), none starting or ending with a hyphen.
    static func isValidHost(_ host: String) -> Bool {
        if isIPv4Literal(host) || isIPv6Literal(host) { return true }
        let bytes = Array(host.utf8)
        guard !bytes.isEmpty, bytes.count <= 253 else { return false }
        // All-digit labels with dots (999.1.1.1) are bad IPv4, not names.
        if bytes.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2e }) { return false }
        let labels = bytes.split(separator: 0x2e, omittingEmptySubsequences: false)
        for (index, label) in labels.enumerated() {
            // A trailing dot (a fully qualified name) leaves one empty label at the end.
            if label.isEmpty && index == labels.count - 1 && index > 0 { continue }
            guard !label.isEmpty, label.count <= 63, label.first != 0x2d, label.last != 0x2d else { return false }
            for byte in label {
                let ok =
                    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a)
                    || byte == 0x2d || byte == 0x5f
                if !ok { return false }
            }
        }
        return true
    }
}

extension String {
    fileprivate func trimmingWhitespace() -> String {
        var scalars = Substring(self)
        while let first = scalars.first, first.isWhitespace { scalars.removeFirst() }
        while let last = scalars.last, last.isWhitespace { scalars.removeLast() }
        return String(scalars)
    }
}

/// A resolved socket address (IPv4 or IPv6), ready for `connect` or `bind`.
///
/// `@unchecked Sendable`: an immutable value (a copy of a `sockaddr_storage`).
public struct CachetSocketAddress: Hashable, @unchecked Sendable, CustomStringConvertible {
    /// The address bytes.
    private(set) var storage: sockaddr_storage
    /// The length of the address in `storage`.
    let length: socklen_t

    /// AF_INET or AF_INET6.
    public var family: Int32 { Int32(storage.ss_family) }

    /// Copies a socket address.
    /// - Parameters:
    ///   - address: a `sockaddr_in` or `sockaddr_in6`.
    ///   - length: its length.
    init?(_ address: UnsafePointer<sockaddr>, length: socklen_t) {
        let family = Int32(address.pointee.sa_family)
        guard family == AF_INET || family == AF_INET6, Int(length) <= MemoryLayout<sockaddr_storage>.size else {
            return nil
        }
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { destination in
            destination.copyMemory(from: UnsafeRawBufferPointer(start: address, count: Int(length)))
        }
        self.storage = storage
        self.length = length
    }

    /// An IPv4 or IPv6 literal and a port; nil if `host` is neither.
    /// - Parameters:
    ///   - host: `127.0.0.1` or `::1` (no brackets).
    ///   - port: the port.
    public init?(literal host: String, port: Int) {
        guard (0...65535).contains(port) else { return nil }
        var storage = sockaddr_storage()
        let networkPort = in_port_t(UInt16(port).bigEndian)
        let length: socklen_t? = withUnsafeMutablePointer(to: &storage) { pointer in
            var v4 = sockaddr_in()
            if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
                v4.sin_family = sa_family_t(AF_INET)
                v4.sin_port = networkPort
                UnsafeMutableRawPointer(pointer).storeBytes(of: v4, as: sockaddr_in.self)
                return socklen_t(MemoryLayout<sockaddr_in>.size)
            }
            var v6 = sockaddr_in6()
            if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
                v6.sin6_family = sa_family_t(AF_INET6)
                v6.sin6_port = networkPort
                UnsafeMutableRawPointer(pointer).storeBytes(of: v6, as: sockaddr_in6.self)
                return socklen_t(MemoryLayout<sockaddr_in6>.size)
            }
            return nil
        }
        guard let length else { return nil }
        self.storage = storage
        self.length = length
    }

    /// The socket address of a descriptor's local end (`getsockname`).
    /// - Parameter fd: a bound socket.
    /// - Returns: the address, or nil if the call fails.
    public static func local(of fd: Int32) -> CachetSocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let status = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard status == 0 else { return nil }
        return withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { CachetSocketAddress($0, length: length) }
        }
    }

    /// The socket address of a connected descriptor's other end (`getpeername`).
    /// - Parameter fd: a connected socket.
    /// - Returns: the address, or nil if the call fails.
    public static func remote(of fd: Int32) -> CachetSocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let status = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        }
        guard status == 0 else { return nil }
        return withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { CachetSocketAddress($0, length: length) }
        }
    }

    /// The port.
    public var port: Int {
        withUnsafeBytes(of: storage) { raw in
            // sin_port and sin6_port sit at the same offset, right after the family.
            Int(UInt16(bigEndian: raw.loadUnaligned(fromByteOffset: 2, as: UInt16.self)))
        }
    }

    /// The IP address as text (no brackets).
    public var ipAddress: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET {
                var v4 = raw.loadUnaligned(as: sockaddr_in.self)
                _ = inet_ntop(AF_INET, &v4.sin_addr, &text, socklen_t(text.count))
            } else {
                var v6 = raw.loadUnaligned(as: sockaddr_in6.self)
                _ = inet_ntop(AF_INET6, &v6.sin6_addr, &text, socklen_t(text.count))
            }
        }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `ip:port`, with an IPv6 address in brackets.
    public var description: String { family == AF_INET6 ? "[\(ipAddress)]:\(port)" : "\(ipAddress):\(port)" }

    /// Calls `body` with the address as a `sockaddr` pointer and its length.
    func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }

    public static func == (lhs: CachetSocketAddress, rhs: CachetSocketAddress) -> Bool {
        lhs.length == rhs.length && lhs.bytes == rhs.bytes
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(bytes) }

    private var bytes: [UInt8] {
        withUnsafeBytes(of: storage) { Array($0.prefix(Int(length))) }
    }
}
