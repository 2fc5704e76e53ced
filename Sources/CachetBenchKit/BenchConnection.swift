import CachetIO

#if canImport(Glibc)
import Glibc
#endif

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
