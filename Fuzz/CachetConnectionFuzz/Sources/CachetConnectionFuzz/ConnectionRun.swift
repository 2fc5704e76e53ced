import CachetWire

#if canImport(Glibc)
import Glibc
#endif

/// One program run on a fresh connection to the node, from one thread: the requests' bytes are written in
/// the program's pieces on a non-blocking socket while the replies are read as they arrive (`poll` on
/// both), and every reply is checked as it is decoded.
///
/// The connection starts with a CLEAR, so that the model of the node's contents starts empty. The model
/// holds each key's last acknowledged value; with the node's memory limit far above what a program stores
/// (and no disk tier, no expiry) nothing is evicted, so the checks are exact:
///
/// - replies come in request order (ids 1, 2, …), with the request's opcode and protocol version 1;
/// - CLEAR and PING answer OK (a PING with an empty body), PUT answers OK with an empty body;
/// - GET answers OK with exactly the model's value, or NOT_FOUND with an empty body when the model has none;
/// - DEL answers OK when the model has a value and NOT_FOUND otherwise, both with an empty body
///   (`Protocol/PROTOCOL.md`, "GET and DEL").
///
/// A reply still missing ``stallSeconds`` after the last byte moved either way is a stall. Any failure
/// stops the process (`fatalError`) with the program and how far it got, so that libFuzzer saves the input.
struct ConnectionRun {
    /// Seconds without a byte moving, while a reply is awaited, before the run is declared stalled.
    static let stallSeconds = 5.0

    /// A request sent, with what its reply is checked against.
    private enum Request {
        case clear
        case put(key: Int, value: [UInt8])
        case get(key: Int)
        case delete(key: Int)
        case ping

        var opcode: CachetOpcode {
            switch self {
            case .clear: return .clear
            case .put: return .put
            case .get: return .get
            case .delete: return .delete
            case .ping: return .ping
            }
        }

        var text: String {
            switch self {
            case .clear: return "CLEAR"
            case .put(let key, let value): return "PUT \(ConnectionProgram.keyName(key)) (\(value.count) B)"
            case .get(let key): return "GET \(ConnectionProgram.keyName(key))"
            case .delete(let key): return "DEL \(ConnectionProgram.keyName(key))"
            case .ping: return "PING"
            }
        }
    }

    /// The bytes up to a WAIT (or the end), and how many replies must have arrived before they are written.
    private struct Segment {
        var bytes: [UInt8]
        var repliesBefore: Int
    }

    private let program: ConnectionProgram
    private let port: Int
    private var requests: [Request] = []
    private var segments: [Segment] = []
    private var model = [[UInt8]?](repeating: nil, count: ConnectionProgram.keys.count)

    private var fd: Int32 = -1
    /// Writing: the segment, the offset in it, what is left of the current piece, and the next piece.
    private var segmentIndex = 0
    private var segmentOffset = 0
    private var pieceLeft = 0
    private var nextPiece = 0
    private var pauseUntil: UInt64 = 0
    private var bytesSent = 0
    private var bytesToSend = 0
    /// Reading: received bytes in `input[readIndex..<writeIndex]`, and the replies checked so far.
    private var input: UnsafeMutableRawBufferPointer
    private var readIndex = 0
    private var writeIndex = 0
    private var replies = 0
    private var lastProgress: UInt64 = 0

    /// Prepares `program` for the node at `port` on 127.0.0.1: its frames, ids from 1 (the CLEAR).
    init(program: ConnectionProgram, port: Int) {
        self.program = program
        self.port = port
        self.input = .allocate(byteCount: 2 << 20, alignment: 16)
        var bytes: [UInt8] = []
        func append(_ request: Request, _ command: CachetCommand) {
            requests.append(request)
            command.encode(id: UInt32(requests.count), to: &bytes)
        }
        append(.clear, .clear)
        // Replies that must have arrived before the current segment is written.
        var waitFor = 0
        for (position, operation) in program.operations.enumerated() {
            switch operation {
            case .put(let key, let size):
                let value = ConnectionProgram.patternValue(count: size, key: key, seed: position)
                append(.put(key: key, value: value), .put(key: ConnectionProgram.keys[key], value: value, ttl: 0))
            case .get(let key):
                append(.get(key: key), .get(key: ConnectionProgram.keys[key]))
            case .delete(let key):
                append(.delete(key: key), .delete(key: ConnectionProgram.keys[key]))
            case .ping:
                append(.ping, .ping)
            case .wait:
                if !bytes.isEmpty { segments.append(Segment(bytes: bytes, repliesBefore: waitFor)) }
                bytes = []
                waitFor = requests.count
            }
        }
        if !bytes.isEmpty { segments.append(Segment(bytes: bytes, repliesBefore: waitFor)) }
        bytesToSend = segments.reduce(0) { $0 + $1.bytes.count }
    }

    /// Connects, runs the program to its last reply, checks every reply and closes the connection.
    mutating func run() {
        defer {
            if fd >= 0 { close(fd) }
            input.deallocate()
        }
        connect()
        lastProgress = Self.now()
        takeNextPiece()
        while replies < requests.count {
            let now = Self.now()
            let canWrite =
                segmentIndex < segments.count && replies >= segments[segmentIndex].repliesBefore
                && now >= pauseUntil
            var events = Int16(POLLIN)
            if canWrite { events |= Int16(POLLOUT) }
            var timeout = Int32(100)
            if !canWrite && pauseUntil > now && segmentIndex < segments.count {
                timeout = Int32(min(100, (pauseUntil - now) / 1_000_000 + 1))
            }
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&entry, 1, timeout)
            if ready < 0 && errno != EINTR { fail("poll failed: errno \(errno)") }
            if ready > 0 {
                if entry.revents & Int16(POLLIN | POLLERR | POLLHUP) != 0 { receive() }
                if entry.revents & Int16(POLLOUT) != 0 && canWrite { send() }
            }
            if Double(Self.now() - lastProgress) / 1e9 > Self.stallSeconds {
                fail("stall: no reply for \(Self.stallSeconds) s after the last byte moved")
            }
        }
        if readIndex != writeIndex {
            fail("\(writeIndex - readIndex) bytes after the last reply")
        }
    }

    // MARK: Writing

    private mutating func takeNextPiece() {
        if nextPiece < program.pieces.count {
            let piece = program.pieces[nextPiece]
            nextPiece += 1
            pieceLeft = piece.size
            pauseUntil = Self.now() + UInt64(piece.pauseMicroseconds) * 1_000
        } else {
            pieceLeft = Int.max
            pauseUntil = 0
        }
    }

    /// Writes what the current piece has left (within the segment), and moves on when it is done.
    private mutating func send() {
        let segment = segments[segmentIndex].bytes
        let count = min(pieceLeft, segment.count - segmentOffset)
        let written = segment.withUnsafeBytes { bytes in
            Glibc.send(fd, bytes.baseAddress! + segmentOffset, count, Int32(MSG_NOSIGNAL))
        }
        if written < 0 {
            if errno == EAGAIN || errno == EINTR { return }
            fail("send failed: errno \(errno)")
        }
        segmentOffset += written
        bytesSent += written
        lastProgress = Self.now()
        if pieceLeft != Int.max { pieceLeft -= written }
        if segmentOffset == segment.count {
            segmentIndex += 1
            segmentOffset = 0
            // A piece never spans a WAIT: the next segment starts a new piece.
            takeNextPiece()
        } else if pieceLeft == 0 {
            takeNextPiece()
        }
    }

    // MARK: Reading

    /// Reads what the socket holds and checks every whole reply.
    private mutating func receive() {
        while true {
            if input.count - writeIndex < 64 << 10 { makeRoom(64 << 10) }
            let room = input.count - writeIndex
            let n = read(fd, input.baseAddress! + writeIndex, room)
            if n < 0 {
                if errno == EAGAIN || errno == EINTR { break }
                fail("read failed: errno \(errno)")
            }
            if n == 0 { fail("the node closed the connection") }
            writeIndex += n
            lastProgress = Self.now()
            decodeReplies()
            if n < room { break }
        }
    }

    /// Moves the unread bytes to the front, or grows the buffer, so that at least `room` bytes are free.
    private mutating func makeRoom(_ room: Int) {
        let unread = writeIndex - readIndex
        if readIndex > 0 {
            memmove(input.baseAddress!, input.baseAddress! + readIndex, unread)
            readIndex = 0
            writeIndex = unread
        }
        if input.count - writeIndex < room {
            let larger = UnsafeMutableRawBufferPointer.allocate(byteCount: input.count * 2, alignment: 16)
            memcpy(larger.baseAddress!, input.baseAddress!, writeIndex)
            input.deallocate()
            input = larger
        }
    }

    private mutating func decodeReplies() {
        let received = UnsafeRawBufferPointer(start: input.baseAddress, count: writeIndex)
        while true {
            let frame: CachetFrame?
            do {
                frame = try CachetReplyDecoder.decodeReply(in: received, at: readIndex)
            } catch {
                fail("undecodable reply: \(error)")
            }
            guard let frame else { break }
            check(frame, body: UnsafeRawBufferPointer(rebasing: received[frame.body]))
            readIndex = frame.end
            replies += 1
        }
        // A reply larger than the buffer: make room for all of it.
        if writeIndex - readIndex >= 4 {
            let length = Int(received.loadUnaligned(fromByteOffset: readIndex, as: UInt32.self).bigEndian)
            if length + 4 > input.count - readIndex { makeRoom(length + 4) }
        }
    }

    private mutating func check(_ frame: CachetFrame, body: UnsafeRawBufferPointer) {
        guard replies < requests.count else { fail("a reply (id \(frame.header.id)) after the last request") }
        let request = requests[replies]
        let id = UInt32(replies + 1)
        let header = frame.header
        let status = header.status
        func failReply(_ message: String) -> Never {
            let text = status == .ok || status == .notFound ? "" : ": \(String(decoding: body, as: UTF8.self))"
            fail("reply \(id) (\(request.text)) \(message) [status \(status)\(text), \(body.count) B]")
        }
        if header.id != id { failReply("has id \(header.id)") }
        if header.version != CachetProtocol.version { failReply("has version \(header.version)") }
        if header.opcode != request.opcode { failReply("has opcode \(header.opcode)") }
        switch request {
        case .clear:
            if status != .ok { failReply("is not OK") }
        case .ping:
            if status != .ok || !body.isEmpty { failReply("is not OK and empty") }
        case .put(let key, let value):
            if status != .ok || !body.isEmpty { failReply("is not OK and empty") }
            model[key] = value
        case .get(let key):
            if let expected = model[key] {
                if status != .ok { failReply("is not OK: \(expected.count) B were stored") }
                let same =
                    body.count == expected.count
                    && (body.isEmpty
                        || expected.withUnsafeBytes { memcmp($0.baseAddress!, body.baseAddress!, body.count) == 0 })
                if !same { failReply("is not the \(expected.count) B stored") }
            } else if status != .notFound || !body.isEmpty {
                failReply("is not NOT_FOUND and empty: nothing was stored")
            }
        case .delete(let key):
            let expected: CachetStatus = model[key] == nil ? .notFound : .ok
            if status != expected || !body.isEmpty { failReply("is not \(expected) and empty") }
            model[key] = nil
        }
    }

    // MARK: Connecting, failing

    private mutating func connect() {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if fd < 0 { fail("socket failed: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(0x7F00_0001).bigEndian
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if result != 0 { fail("connect to 127.0.0.1:\(port) failed: errno \(errno)") }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    private func fail(_ message: String) -> Never {
        let awaited = replies < requests.count ? ", awaiting \(replies + 1) (\(requests[replies].text))" : ""
        fatalError(
            "\(message)\n  replies: \(replies) of \(requests.count)\(awaited); bytes sent: \(bytesSent) of "
                + "\(bytesToSend)\n  program: CLEAR, then \(program)"
        )
    }

    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
