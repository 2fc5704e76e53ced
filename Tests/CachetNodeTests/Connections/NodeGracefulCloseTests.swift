import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A connection the node closes (a fatal frame) must still deliver every reply queued before it, then
/// the fatal reply, then end with FIN: closing a socket with unread input makes the kernel send RST,
/// which discards replies the client has not read yet (issue 12, section 3).
@Suite("Node: graceful close after a fatal frame", .dedicatedThreads)
struct NodeGracefulCloseTests {
    @Test(arguments: 0..<3)
    func repliesBeforeAFatalFrameAllArriveThenTheFatalReplyThenEndOfStream(trial: Int) throws {
        try withNode { server, port in
            let value = (0..<65_536).map { UInt8(truncatingIfNeeded: $0 &+ trial) }
            let setup = try TestSocket(port: port)
            #expect(try setup.roundTrip(.put(key: Array("v".utf8), value: value, ttl: 0)).status == .ok)
            setup.close()

            let client = try TestSocket(port: port, timeout: 5)
            client.setReceiveBuffer(16 * 1024)
            var stream: [UInt8] = []
            for id in 1...50 { stream += CachetCommand.get(key: Array("v".utf8)).encoded(id: UInt32(id)) }
            stream += [0, 0, 0, 3]
            stream += [UInt8](repeating: 0xEE, count: 100_000)
            try client.send(stream)
            // Let the node fill its side before the client starts reading.
            usleep(100_000)
            var received = ReplyReader(fd: client.fd)
            for id in 1...50 {
                let reply = try received.next()
                #expect(reply?.id == UInt32(id) && reply?.status == .ok && reply?.body == value)
            }
            let fatal = try received.next()
            #expect(fatal?.status == .badRequest && fatal?.id == 0 && fatal?.opcode == CachetOpcode.none)
            #expect(try received.next() == nil, "the stream must end after the fatal reply")
            #expect(received.endedWithReset == false, "the connection must end with FIN, not RST")
            client.close()
            #expect(waitForConnections(server, toReach: 0))
        }
    }
}

/// Reads replies from a socket (blocking or not), telling an orderly end of stream from a reset. A wait for
/// bytes that lasts longer than `timeout` seconds fails with `ETIMEDOUT`.
struct ReplyReader {
    let fd: Int32
    let timeout: Double
    var buffer: [UInt8] = []
    var endedWithReset = false

    init(fd: Int32, timeout: Double = 10) {
        self.fd = fd
        self.timeout = timeout
    }

    /// The next reply, or nil at the end of the stream (FIN or RST; see `endedWithReset`).
    mutating func next() throws -> CachetResponse? {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            if let (response, end) = try buffer.withUnsafeBytes({ try CachetResponse.decode(from: $0) }) {
                buffer.removeFirst(end)
                return response
            }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
            if n > 0 {
                buffer += chunk[0..<n]
                continue
            }
            if n == 0 { return nil }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK {
                var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                if poll(&ready, 1, Int32(timeout * 1000)) > 0 { continue }
                throw ReplyReaderError(errno: ETIMEDOUT, buffered: buffer.count)
            }
            if errno == ECONNRESET {
                endedWithReset = true
                return nil
            }
            throw ReplyReaderError(errno: errno, buffered: buffer.count)
        }
    }
}

/// A read that failed other than by end of stream or reset (a timeout among them).
struct ReplyReaderError: Error {
    let errno: Int32
    let buffered: Int
}
