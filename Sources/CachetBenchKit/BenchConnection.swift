import CachetIO

#if canImport(Glibc)
import Glibc
#endif

/// One connection's state, kept in memory owned by one load thread (``BenchLoadThread``), touched through
/// pointers so that the load loop handles no reference counts. `~Copyable`: it owns its socket and buffers,
/// and releases them when it goes away.
struct BenchConnectionState: ~Copyable {
    let fd: Int32
    /// Index of the server in ``BenchConfiguration/targets``.
    let target: Int
    /// Requests written and not yet (fully) sent: the read index is how far sending got.
    var output: CachetByteBuffer
    /// Bytes received: the read index is where the next reply starts.
    var input: CachetByteBuffer
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
        output = CachetByteBuffer(capacity: min(pipeline * requestBound, 4 << 20))
        input = CachetByteBuffer(capacity: 64 << 10)
        ring = .allocate(capacity: pipeline)
        ringCapacity = pipeline
    }

    deinit {
        CachetSocket.close(fd)
        ring.deallocate()
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
}

/// Opens a TCP connection through CachetIO: non-blocking, TCP_NODELAY, close-on-exec.
/// - Throws: ``BenchError`` with code `connectionFailed` naming the server.
func openConnection(to target: BenchTarget) throws(BenchError) -> Int32 {
    do {
        return try CachetSocket.connect(
            to: CachetAddress(host: target.host, port: target.port),
            timeout: .seconds(5),
            blocking: false
        )
    } catch {
        throw BenchError(.connectionFailed, error.message)
    }
}

/// The monotonic clock in nanoseconds.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}
