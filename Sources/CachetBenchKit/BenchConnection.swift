import CachetIO

#if canImport(Glibc)
import Glibc
#endif

/// One connection's state, kept in memory owned by one load thread (``BenchLoadThread``), touched through
/// pointers so that the load loop handles no reference counts. `~Copyable`: it owns its socket and buffers,
/// and releases them when it goes away.
struct BenchConnectionState: ~Copyable {
    let fd: Int32
    /// The connection's TLS session (`--tls`), its handshake done; nil for plain TCP.
    let tls: CachetTLSSession?
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

    init(fd: Int32, tls: CachetTLSSession?, target: Int, pipeline: Int, requestBound: Int) {
        self.fd = fd
        self.tls = tls
        self.target = target
        output = CachetByteBuffer(capacity: min(pipeline * requestBound, 4 << 20))
        input = CachetByteBuffer(capacity: 64 << 10)
        ring = .allocate(capacity: pipeline)
        ringCapacity = pipeline
    }

    deinit {
        tls?.close()
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

/// Opens a TCP connection through CachetIO: non-blocking, TCP_NODELAY, close-on-exec; with `tls`, also
/// completes a TLS handshake (within the same 5 s).
/// - Throws: ``BenchError`` with code `connectionFailed` naming the server (and OpenSSL's reason).
func openConnection(to target: BenchTarget, tls: CachetTLSContext?) throws(BenchError) -> (
    fd: Int32, tls: CachetTLSSession?
) {
    let deadline = CachetDeadline(after: .seconds(5))
    let address = CachetAddress(host: target.host, port: target.port)
    let fd: Int32
    do {
        fd = try CachetSocket.connect(to: address, timeout: .seconds(5), blocking: false)
    } catch {
        throw BenchError(.connectionFailed, error.message)
    }
    guard let tls else { return (fd, nil) }
    do {
        let session = try tls.session(for: fd)
        try session.completeHandshake(fd: fd, until: deadline, peer: "\(address)")
        return (fd, session)
    } catch {
        CachetSocket.close(fd)
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
