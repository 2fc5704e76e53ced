import CEpoll
import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// One client connection: its socket, buffers and flow-control state.
///
/// Touched only on its event loop's queue; the loop owns it. The connection does the system calls
/// (read, send, close) and leaves protocol work to ``RequestProcessor``.
///
/// `@unchecked Sendable`: a disk completion carries the reference through the disk queue, but every
/// property is read and written only on the owning loop's queue (completions hop back with `EventLoop.execute`).
///
/// `@exclusivity(unchecked)`: the stored properties are touched on every request, and the run-time
/// exclusivity check on a class property (a thread-local access set, two runtime calls per access) cost
/// about a third of the node's instructions per small GET (Benchmarks/callgrind.sh). The single-queue
/// rule above is what keeps accesses from overlapping; no code holds an `inout` to one of these across a
/// call that could reach the same property.
final class Connection: @unchecked Sendable {
    let fd: Int32
    let token: UInt64
    @exclusivity(unchecked) var input: ByteBuffer
    @exclusivity(unchecked) var output: ByteBuffer
    /// The epoll events currently registered (edge-triggered; see `EventLoop`).
    @exclusivity(unchecked) var interest: UInt32 = 0
    /// Reading stopped before the socket was drained; the registration must be renewed so that epoll
    /// reports the bytes left (no new edge would).
    @exclusivity(unchecked) var rearm = false
    /// The peer has closed its sending side.
    @exclusivity(unchecked) var readClosed = false
    /// A fatal reply is queued; close once it is sent.
    @exclusivity(unchecked) var closeAfterFlush = false
    /// The input holds frames that wait for the output to drain.
    @exclusivity(unchecked) var outputBlocked = false
    /// A request waits for the disk queue; nothing more is read or answered until it completes.
    @exclusivity(unchecked) var suspended = false
    /// The length of the partial frame at the head of the input, 0 if unknown.
    @exclusivity(unchecked) var pendingFrameLength = 0
    @exclusivity(unchecked) var isClosed = false
    /// A large PUT whose value is being read straight into its entry; nil otherwise.
    @exclusivity(unchecked) var directPut: DirectPut?
    /// When the last bytes arrived; kept only while the loop drains.
    @exclusivity(unchecked) var lastReceived = DispatchTime(uptimeNanoseconds: 0)

    static let initialBufferSize = 16 * 1024
    static let minimumReadRoom = 4096
    /// Buffers up to this size are kept between requests, so that replies of large values do not pay for
    /// a fresh allocation (and its page faults) each time; larger ones go back once empty.
    static let retainedBufferLimit = 4 << 20

    init(fd: Int32, token: UInt64) {
        self.fd = fd
        self.token = token
        input = ByteBuffer(capacity: Self.initialBufferSize)
        output = ByteBuffer(capacity: Self.initialBufferSize)
    }

    /// Readable, or the peer has closed its side: `EPOLLRDHUP` tells a short read that left the end of
    /// the stream behind (it needs one more read) from one that drained the socket.
    static let readInterest = cachet_EPOLLIN | cachet_EPOLLRDHUP

    /// Whether the loop should read from the socket, and watch it for readability. Never once the connection
    /// is closed: a send that fails while a batch is answered closes it, and its descriptor number may
    /// already belong to a new connection.
    var wantsRead: Bool { !isClosed && !readClosed && !closeAfterFlush && !outputBlocked && !suspended }

    /// The epoll events this connection needs now.
    var desiredInterest: UInt32 {
        (wantsRead ? Self.readInterest : 0) | (output.readableBytes > 0 ? cachet_EPOLLOUT : 0)
    }

    enum ReadResult {
        case data
        case wouldBlock
        case endOfStream
        case failed(Int32)
    }

    /// Reads once into the input buffer, making room for the frame being received.
    func readOnce() -> ReadResult {
        // Room for the rest of the frame being received, growing by doubling as its bytes arrive so that
        // a peer that only announces a large frame does not make the node allocate all of it up front.
        let missing = max(0, pendingFrameLength - input.readableBytes)
        input.reserveWritable(max(Self.minimumReadRoom, min(missing, input.capacity)))
        let (result, count) = readOnce(into: input.writePointer, count: input.writableBytes)
        if count > 0 { input.moveWriteIndex(forwardBy: count) }
        return result
    }

    /// Reads once straight into a large PUT's entry, at most the bytes its value still lacks (so that the
    /// frames after it stay in the socket for the input buffer).
    func readValue(into put: DirectPut) -> ReadResult {
        let room = put.remaining
        let (result, count) = readOnce(into: room.baseAddress!, count: room.count)
        put.received += count
        return result
    }

    /// One `read`, retried on EINTR; the bytes read come back with `.data`.
    private func readOnce(into buffer: UnsafeMutableRawPointer, count: Int) -> (ReadResult, Int) {
        while true {
            let n = read(fd, buffer, count)
            if n > 0 { return (.data, n) }
            if n == 0 { return (.endOfStream, 0) }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return (.wouldBlock, 0) }
            return (.failed(code), 0)
        }
    }

    enum FlushResult {
        case drained
        case partial
        case failed(Int32)
    }

    /// Sends as much pending output as the socket takes.
    func flush() -> FlushResult {
        while output.readableBytes > 0 {
            let region = output.readableRegion
            let n = cachet_send(fd, region.baseAddress, UInt(region.count))
            if n > 0 {
                output.moveReadIndex(forwardBy: n)
                continue
            }
            let code = errno
            if n < 0 && code == EINTR { continue }
            if n < 0 && (code == EAGAIN || code == EWOULDBLOCK) { return .partial }
            return .failed(code)
        }
        output.shrinkIfEmpty(above: Self.retainedBufferLimit, to: Self.initialBufferSize)
        return .drained
    }
}
