import CEpoll

#if canImport(Glibc)
import Glibc
#endif

/// A growable byte buffer in manually managed memory: no reference counting on the hot path.
/// Copies share the memory; exactly one copy (inside a ``BenchConnectionState``) owns it.
struct BenchByteBuffer {
    private(set) var base: UnsafeMutableRawPointer
    /// Bytes in use, from `base`.
    var count = 0
    private(set) var capacity: Int

    init(capacity: Int) {
        self.capacity = max(capacity, 64)
        base = malloc(self.capacity)!
    }

    /// Makes room for at least `minimum` bytes in all, doubling.
    mutating func reserve(_ minimum: Int) {
        guard minimum > capacity else { return }
        var grown = capacity
        while grown < minimum { grown *= 2 }
        base = realloc(base, grown)!
        capacity = grown
    }

    func free() { Glibc.free(base) }
}

/// One connection's state, kept in an array of plain structs owned by one load thread.
struct BenchConnectionState {
    let fd: Int32
    /// Index of the server in ``BenchConfiguration/targets``.
    let target: Int
    /// Requests written and not yet (fully) sent: `output[sent..<output.count]`.
    var output: BenchByteBuffer
    var sent = 0
    /// Bytes received: replies start at `inputStart`, bytes end at `input.count`.
    var input: BenchByteBuffer
    var inputStart = 0
    /// In-flight requests, oldest first: send time in nanoseconds shifted left once, low bit set for a read.
    let ring: UnsafeMutablePointer<UInt64>
    let ringCapacity: Int
    var ringHead = 0
    var inFlight = 0
    /// Whether EPOLLOUT is armed.
    var writeInterest = false

    init(fd: Int32, target: Int, pipeline: Int, requestBound: Int) {
        self.fd = fd
        self.target = target
        output = BenchByteBuffer(capacity: min(pipeline * requestBound, 4 << 20))
        input = BenchByteBuffer(capacity: 64 << 10)
        ring = .allocate(capacity: pipeline)
        ringCapacity = pipeline
    }

    @inline(__always)
    mutating func push(sentAt time: UInt64, read: Bool) {
        var slot = ringHead + inFlight
        if slot >= ringCapacity { slot -= ringCapacity }
        ring[slot] = time << 1 | (read ? 1 : 0)
        inFlight += 1
    }

    @inline(__always)
    mutating func pop() -> (time: UInt64, read: Bool) {
        let entry = ring[ringHead]
        ringHead += 1
        if ringHead == ringCapacity { ringHead = 0 }
        inFlight -= 1
        return (entry >> 1, entry & 1 == 1)
    }

    func close() {
        _ = Glibc.close(fd)
        output.free()
        input.free()
        ring.deallocate()
    }
}

/// Opens a TCP connection, then makes it non-blocking with TCP_NODELAY.
/// - Throws: ``BenchError`` with code `connectionFailed` naming the server.
func openConnection(to target: BenchTarget) throws(BenchError) -> Int32 {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(truncatingIfNeeded: target.port).bigEndian)
    guard inet_pton(AF_INET, target.host == "localhost" ? "127.0.0.1" : target.host, &address.sin_addr) == 1 else {
        throw BenchError(.connectionFailed, "'\(target.host)' is not an IPv4 address")
    }
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else {
        throw BenchError(.connectionFailed, "socket() failed: \(String(cString: strerror(errno)))")
    }
    var result: Int32
    repeat {
        result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    } while result != 0 && errno == EINTR
    guard result == 0 else {
        let reason = String(cString: strerror(errno))
        _ = close(fd)
        throw BenchError(.connectionFailed, "cannot connect to \(target): \(reason); is the server running?")
    }
    var one: Int32 = 1
    _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    return fd
}

/// The monotonic clock in nanoseconds.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}
