import CEpoll
import CachetIO
import CachetLocking
import CachetWire
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Who waits for a request: a caller's continuation, or the node's own health probe.
enum ClientWaiter: Sendable {
    case caller(UnsafeContinuation<ClientOutcome, Never>)
    case batch(BatchCollector, Int)
    case probe

    /// Hands the outcome over.
    func resume(_ outcome: ClientOutcome, node: NodeClient) {
        switch self {
        case .caller(let continuation): continuation.resume(returning: outcome)
        case .batch(let collector, let index): collector.complete(index, outcome)
        case .probe:
            if case .reply(let status, _) = outcome {
                node.probeAnswered(status: status)
            } else {
                node.probeFailed()
            }
        }
    }
}

/// How a request ended, as handed to its caller.
enum ClientOutcome: Sendable {
    case reply(CachetStatus, [UInt8])
    case failure(CachetClientError)
}

/// One pooled connection to a node, reopened when it closes: many requests in flight on one socket,
/// matched by id (``ConnectionStateMachine``).
///
/// Requests are written by the calling thread straight away when no other write is under way;
/// requests issued while one is (by other tasks, or a batch) are appended to the output buffer and go
/// out with the next send, so requests of the same turn share one `send`. Only when the socket's buffer
/// is full does the event loop take over the writing. Replies are read and callers resumed on the event
/// loop's queue.
final class ConnectionSlot: @unchecked Sendable {
    // `state` is guarded by its mutex. `readBuffer`, `readCount` and `readCapacity` are used only on the
    // event loop's queue. `token` and the references are immutable.
    private struct State {
        var machine = ConnectionStateMachine<ClientWaiter>()
        /// Requests encoded and not yet handed to a writer.
        var output: [UInt8] = []
        /// An emptied buffer kept to swap with `output`, so that writing allocates nothing.
        var spare: [UInt8] = []
        /// The socket, or -1.
        var fd: Int32 = -1
        /// Counts the sockets this slot opened; events of an older socket are ignored.
        var generation: UInt32 = 0
        /// A calling thread is sending, or the loop waits for the socket to become writable.
        var writing = false
        /// A write the socket's buffer could not take, continued by the loop when it is writable.
        var blocked: [UInt8] = []
        var blockedOffset = 0
        /// A socket closed while a calling thread was sending on it: that thread closes it.
        var retiredFD: Int32 = -1
        /// When the connect in progress times out.
        var connectDeadline: UInt64 = 0
        /// The socket has connected.
        var socketConnected = false
    }

    unowned let node: NodeClient
    unowned let loop: ClientEventLoop
    let index: Int
    private let state = CachetLock(State())
    private let nextID = Atomic<UInt32>(1)
    private var readBuffer: UnsafeMutableRawPointer
    private var readCapacity = 64 << 10
    private var readCount = 0

    init(node: NodeClient, loop: ClientEventLoop, index: Int) {
        self.node = node
        self.loop = loop
        self.index = index
        readBuffer = UnsafeMutableRawPointer.allocate(byteCount: readCapacity, alignment: 16)
    }

    deinit {
        readBuffer.deallocate()
    }

    /// A fresh request id.
    @inline(__always)
    func reserveID() -> UInt32 { nextID.wrappingAdd(1, ordering: .relaxed).oldValue }

    /// Requests waited for on this slot.
    var waiting: Int { state.withLock { $0.machine.waiting } }

    /// Whether the timer must run for this slot: requests waited for, or a connect in progress.
    var needsTimer: Bool {
        state.withLock { $0.machine.waiting > 0 || $0.machine.state == .connecting || $0.machine.state == .draining }
    }

    /// Issues request `id`: encodes it, queues its waiter, and writes it (or starts connecting).
    /// Called on the caller's thread, inside `withUnsafeContinuation`.
    func issue(_ request: ClientRequest, id: UInt32, waiter: ClientWaiter, deadline: UInt64) {
        let cancelled: Bool
        if case .caller = waiter { cancelled = Task.isCancelled } else { cancelled = false }
        enum Next {
            case none
            case connect
            case write(Int32)
            case reject(CachetClientError)
        }
        // The buffer to send is moved out with `swap`, never copied, so that it stays uniquely
        // referenced and is reused without allocating.
        var outgoing: [UInt8] = []
        let next = state.withLock { state -> Next in
            if cancelled {
                return .reject(CachetClientError(code: .cancelled, message: "the calling task was cancelled"))
            }
            let action = state.machine.issue(id: id, waiter: waiter, deadline: deadline)
            switch action {
            case .rejectShutdown:
                return .reject(node.shutdownError())
            case .connect:
                request.encode(id: id, to: &state.output)
                state.connectDeadline = monotonicNanoseconds() &+ node.connectTimeoutNanoseconds
                return .connect
            case .wait:
                request.encode(id: id, to: &state.output)
                return .none
            case .write:
                request.encode(id: id, to: &state.output)
                guard !state.writing else { return .none }
                state.writing = true
                swap(&outgoing, &state.output)
                swap(&state.output, &state.spare)
                return .write(state.fd)
            }
        }
        switch next {
        case .none:
            loop.armTimer()
        case .connect:
            loop.armTimer()
            connect()
        case .write(let fd):
            loop.armTimer()
            write(&outgoing, offset: 0, fd: fd)
        case .reject(let error):
            waiter.resume(.failure(error), node: node)
        }
    }

    /// Issues `count` requests in one turn: `produce(i, encode)` calls `encode(request, id, waiter)` for
    /// request `i`. They go out in one write (or with the connect).
    func issueBatch(
        count: Int,
        deadline: UInt64,
        _ produce: (Int, (ClientRequest, UInt32, ClientWaiter) -> Void) -> Void
    ) {
        var rejected: [(ClientWaiter, CachetClientError)] = []
        enum Next {
            case none
            case connect
            case write(Int32)
        }
        var outgoing: [UInt8] = []
        let next = state.withLock { state -> Next in
            var next = Next.none
            for position in 0..<count {
                produce(position) { request, id, waiter in
                    switch state.machine.issue(id: id, waiter: waiter, deadline: deadline) {
                    case .rejectShutdown:
                        rejected.append((waiter, node.shutdownError()))
                    case .connect:
                        request.encode(id: id, to: &state.output)
                        state.connectDeadline = monotonicNanoseconds() &+ node.connectTimeoutNanoseconds
                        next = .connect
                    case .wait:
                        request.encode(id: id, to: &state.output)
                    case .write:
                        request.encode(id: id, to: &state.output)
                    }
                }
            }
            if case .connect = next { return .connect }
            guard state.machine.state == .ready, !state.writing, !state.output.isEmpty, state.fd >= 0 else {
                return .none
            }
            state.writing = true
            swap(&outgoing, &state.output)
            swap(&state.output, &state.spare)
            return .write(state.fd)
        }
        loop.armTimer()
        switch next {
        case .none: break
        case .connect: connect()
        case .write(let fd): write(&outgoing, offset: 0, fd: fd)
        }
        for (waiter, error) in rejected { waiter.resume(.failure(error), node: node) }
    }

    /// The caller of request `id` gave up: fail it now; its reply is dropped when it comes.
    func abandon(id: UInt32) {
        let waiter = state.withLock { $0.machine.abandon(id: id) }
        waiter?.resume(
            .failure(CachetClientError(code: .cancelled, message: "the calling task was cancelled")),
            node: node
        )
    }

    // MARK: Connecting

    private func token(generation: UInt32) -> UInt64 { UInt64(generation) << 32 | UInt64(index) }

    /// Opens the socket (on the caller's thread; the loop sees it complete).
    private func connect() {
        let fd: Int32
        let connected: Bool
        do {
            let inProgress: Bool
            (fd, inProgress) = try CachetSocket.startConnect(to: try node.address())
            connected = !inProgress
        } catch {
            connectFailed(error: error)
            return
        }
        let generation = state.withLock { state -> UInt32? in
            guard state.machine.state == .connecting || state.machine.state == .draining else { return nil }
            state.generation &+= 1
            state.fd = fd
            return state.generation
        }
        guard let generation else {
            Glibc.close(fd)
            return
        }
        let events = connected ? cachet_EPOLLIN : cachet_EPOLLOUT
        let error = loop.register(fd: fd, events: events | cachet_EPOLLRDHUP, token: token(generation: generation))
        if error != 0 {
            closeSocket(
                generation: generation,
                failure: CachetClientError(
                    code: .connectionFailed,
                    message: "could not watch the connection's socket",
                    node: node.id,
                    underlying: CachetIOError(code: .resourceExhausted, message: "epoll_ctl failed", systemError: error)
                )
            )
            return
        }
        if connected {
            loop.queue.async { self.becameConnected(generation: generation) }
        }
    }

    /// The connect could not even start (no socket, no such host): every queued request fails, and the
    /// node goes down.
    private func connectFailed(error: CachetIOError) {
        let waiters = state.withLock { state -> [ClientWaiter] in
            state.output.removeAll(keepingCapacity: true)
            return state.machine.closed()
        }
        let failure = CachetClientError(
            code: .connectionFailed,
            message: "could not connect to \(node.node.host) port \(node.node.port): is the node running?",
            node: node.id,
            underlying: error
        )
        node.connectFailed()
        fail(waiters, with: failure)
    }

    /// The socket connected (on the loop): write what is queued.
    private func becameConnected(generation: UInt32) {
        var outgoing: [UInt8] = []
        let next = state.withLock { state -> Int32? in
            guard generation == state.generation, state.fd >= 0 else { return nil }
            state.socketConnected = true
            guard state.machine.connected(), !state.writing, !state.output.isEmpty else { return nil }
            state.writing = true
            swap(&outgoing, &state.output)
            swap(&state.output, &state.spare)
            return state.fd
        }
        let fd = state.withLock { $0.generation == generation ? $0.fd : -1 }
        if fd >= 0 {
            loop.modify(fd: fd, events: cachet_EPOLLIN | cachet_EPOLLRDHUP, token: token(generation: generation))
        }
        if let fd = next { write(&outgoing, offset: 0, fd: fd) }
    }

    // MARK: Writing

    /// Sends `buffer[offset...]` and whatever is appended meanwhile, until all is sent or the socket is
    /// full. The thread that set `writing` is the only writer until it clears it.
    private func write(_ buffer: inout [UInt8], offset firstOffset: Int, fd: Int32) {
        var offset = firstOffset
        while true {
            let result = buffer.withUnsafeBytes { bytes in
                CachetSocket.send(fd, UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            }
            let sent: Int
            switch result {
            case .bytes(let count): sent = count
            case .wouldBlock: sent = 0
            case .endOfStream, .failed: sent = -1
            }
            if sent < 0 {
                // The loop sees the error on the socket and closes it; give the buffer back.
                shutdown(fd, Int32(SHUT_RDWR))
                finishWriting(fd: fd, returning: &buffer)
                return
            }
            offset += sent
            if offset < buffer.count {
                if sent == 0 {
                    waitUntilWritable(fd: fd, buffer: &buffer, offset: offset)
                    return
                }
                continue
            }
            buffer.removeAll(keepingCapacity: true)
            offset = 0
            let more = state.withLock { state -> Bool in
                guard state.fd == fd, !state.output.isEmpty else { return false }
                swap(&buffer, &state.output)
                return true
            }
            if !more {
                finishWriting(fd: fd, returning: &buffer)
                return
            }
        }
    }

    /// Ends a write: hands the emptied buffer back, and closes the socket if it was retired meanwhile.
    private func finishWriting(fd: Int32, returning buffer: inout [UInt8]) {
        buffer.removeAll(keepingCapacity: true)
        let close = state.withLock { state -> Bool in
            if state.spare.capacity < buffer.capacity { swap(&state.spare, &buffer) }
            if state.retiredFD == fd {
                state.retiredFD = -1
                return true
            }
            if state.fd == fd { state.writing = false }
            return false
        }
        if close { Glibc.close(fd) }
    }

    /// The socket is full: the loop finishes the write when it can.
    private func waitUntilWritable(fd: Int32, buffer: inout [UInt8], offset: Int) {
        let generation = state.withLock { state -> UInt32? in
            if state.retiredFD == fd {
                state.retiredFD = -1
                return nil
            }
            swap(&state.blocked, &buffer)
            state.blockedOffset = offset
            return state.generation
        }
        guard let generation else {
            Glibc.close(fd)
            return
        }
        loop.modify(
            fd: fd,
            events: cachet_EPOLLIN | cachet_EPOLLOUT | cachet_EPOLLRDHUP,
            token: token(generation: generation)
        )
    }

    /// The socket is writable again (on the loop).
    private func resumeWriting(generation: UInt32) {
        var outgoing: [UInt8] = []
        let next = state.withLock { state -> (Int, Int32)? in
            guard generation == state.generation, state.fd >= 0, !state.blocked.isEmpty else { return nil }
            swap(&outgoing, &state.blocked)
            return (state.blockedOffset, state.fd)
        }
        guard let (offset, fd) = next else { return }
        loop.modify(fd: fd, events: cachet_EPOLLIN | cachet_EPOLLRDHUP, token: token(generation: generation))
        write(&outgoing, offset: offset, fd: fd)
    }

    // MARK: Reading (on the loop)

    /// Handles epoll events for socket `generation`.
    func handle(events: UInt32, generation: UInt32) {
        let (current, connected) = state.withLock { ($0.generation == generation ? $0.fd : -1, $0.socketConnected) }
        guard current >= 0 else { return }
        if !connected {
            guard events & (cachet_EPOLLOUT | cachet_EPOLLERR | cachet_EPOLLHUP) != 0 else { return }
            let error = CachetSocket.pendingError(current)
            if error != 0 || events & cachet_EPOLLERR != 0 {
                node.connectFailed()
                closeSocket(
                    generation: generation,
                    failure: CachetClientError(
                        code: .connectionFailed,
                        message: "could not connect to \(node.node.host) port \(node.node.port): is the node running?",
                        node: node.id,
                        underlying: CachetIOError(
                            code: .connectionRefused,
                            message: "connect failed",
                            systemError: error == 0 ? ECONNREFUSED : error
                        )
                    )
                )
                return
            }
            becameConnected(generation: generation)
            return
        }
        if events & cachet_EPOLLOUT != 0 { resumeWriting(generation: generation) }
        if events & (cachet_EPOLLIN | cachet_EPOLLERR | cachet_EPOLLHUP | cachet_EPOLLRDHUP) != 0 {
            read(fd: current, generation: generation)
        }
    }

    private func read(fd: Int32, generation: UInt32) {
        while true {
            if readCount == readCapacity { growReadBuffer(to: readCapacity * 2) }
            let got: Int
            switch CachetSocket.read(fd, into: readBuffer + readCount, count: readCapacity - readCount) {
            case .bytes(let count):
                got = count
            case .wouldBlock:
                return
            case .endOfStream, .failed:
                closeSocket(
                    generation: generation,
                    failure: CachetClientError(
                        code: .connectionFailed,
                        message: "the connection to the node closed with requests in flight",
                        node: node.id
                    )
                )
                return
            }
            readCount += got
            guard decodeReplies(generation: generation) else { return }
            if readCount < readCapacity && got < readCapacity / 2 { return }
        }
    }

    /// Decodes and delivers every whole reply in the read buffer, then moves a partial one to the front
    /// (a frame larger than the buffer makes `read` grow it); false when the socket was closed.
    private func decodeReplies(generation: UInt32) -> Bool {
        var offset = 0
        let buffer = UnsafeRawBufferPointer(start: readBuffer, count: readCount)
        while true {
            let found: CachetFrame?
            do {
                found = try CachetReplyDecoder.decodeReply(
                    in: buffer,
                    at: offset,
                    maximumPayloadLength: node.maximumFrameLength
                )
                if let found { try CachetReplyDecoder.validateReplyHeader(found.header) }
            } catch {
                readCount = 0
                protocolViolation(generation: generation, detail: error.message, underlying: error)
                return false
            }
            guard let frame = found else { break }
            offset = frame.end
            if frame.header.opcode == .none && frame.header.id == 0 && frame.header.status != .ok {
                // A fatal reply (UNAVAILABLE over the connection limit, or a framing error): the node
                // closes the connection after it.
                let text = String(decoding: UnsafeRawBufferPointer(rebasing: buffer[frame.body]), as: UTF8.self)
                readCount = 0
                closeSocket(
                    generation: generation,
                    failure: CachetClientError(
                        code: frame.header.status == .unavailable ? .unavailable : .protocolViolation,
                        message: "the node answered \(frame.header.status) and closed the connection: \(text)",
                        node: node.id
                    )
                )
                return false
            }
            let action = state.withLock { $0.machine.replyReceived(id: frame.header.id) }
            switch action {
            case .deliver(let waiter):
                node.replied()
                let body = frame.body.isEmpty ? [] : Array(UnsafeRawBufferPointer(rebasing: buffer[frame.body]))
                waiter.resume(.reply(frame.header.status, body), node: node)
            case .discard:
                node.replied()
            case .protocolViolation(let waiters):
                readCount = 0
                let failure = CachetClientError(
                    code: .protocolViolation,
                    message: "the node sent a reply with id \(frame.header.id) to no request in flight: "
                        + "is this port a Cachet node?",
                    node: node.id
                )
                fail(waiters, with: failure)
                closeSocket(generation: generation, failure: failure)
                return false
            }
        }
        if offset > 0 {
            if offset < readCount { readBuffer.copyMemory(from: readBuffer + offset, byteCount: readCount - offset) }
            readCount -= offset
        }
        return true
    }

    private func growReadBuffer(to capacity: Int) {
        let grown = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        grown.copyMemory(from: readBuffer, byteCount: readCount)
        readBuffer.deallocate()
        readBuffer = grown
        readCapacity = capacity
    }

    private func protocolViolation(generation: UInt32, detail: String, underlying: CachetWireError) {
        closeSocket(
            generation: generation,
            failure: CachetClientError(
                code: .protocolViolation,
                message: "the node sent bytes that are not a Cachet reply (\(detail)): is this port a Cachet node?",
                node: node.id,
                underlying: underlying
            )
        )
    }

    // MARK: Closing

    /// Closes socket `generation` (if still current) and fails every request on it with `failure`.
    func closeSocket(generation: UInt32, failure: CachetClientError) {
        let (fd, waiters, closeNow) = state.withLock { state -> (Int32, [ClientWaiter], Bool) in
            guard state.generation == generation, state.fd >= 0 else { return (-1, [], false) }
            let fd = state.fd
            state.fd = -1
            state.output.removeAll(keepingCapacity: true)
            state.socketConnected = false
            let waiters = state.machine.closed()
            let callerWriting = state.writing && state.blocked.isEmpty
            state.blocked = []
            if callerWriting {
                // Only a calling thread in `write` still uses the descriptor: it closes it.
                state.retiredFD = fd
                state.writing = false
                return (fd, waiters, false)
            }
            state.writing = false
            return (fd, waiters, true)
        }
        guard fd >= 0 else { return }
        loop.unregister(fd: fd)
        if closeNow { Glibc.close(fd) }
        readCount = 0
        fail(waiters, with: failure)
        node.slotClosed()
    }

    /// Closes the current socket, whatever its generation (the node went down, or the client shut down).
    func closeCurrent(failure: CachetClientError) {
        let generation = state.withLock { $0.generation }
        loop.queue.async { self.closeSocket(generation: generation, failure: failure) }
    }

    /// Closes the current socket at once (on the loop).
    func closeNow(failure: CachetClientError) {
        let generation = state.withLock { $0.generation }
        closeSocket(generation: generation, failure: failure)
    }

    /// Shutting down: refuse new requests; returns whether nothing is in flight any more.
    func drain() -> Bool {
        state.withLock { $0.machine.drain() }
    }

    /// Whether the slot has shut down and closed its socket.
    var isShutDown: Bool { state.withLock { $0.machine.state == .shutdown && $0.fd < 0 } }

    /// Times out requests and a connect past their deadlines (on the loop); returns the number of
    /// requests that timed out.
    func expire(now: UInt64) -> Int {
        let (waiters, connectTimedOut, generation) = state.withLock {
            state -> ([ClientWaiter], Bool, UInt32) in
            let waiters = state.machine.expire(now: now)
            let connectTimedOut =
                (state.machine.state == .connecting || (!state.socketConnected && state.fd >= 0))
                && state.connectDeadline <= now
            return (waiters, connectTimedOut, state.generation)
        }
        if !waiters.isEmpty {
            // Count the timeouts before resuming the callers, so that a caller sees the node's health
            // as it is after its own timeout.
            node.timedOut(count: waiters.count)
            fail(
                waiters,
                with: CachetClientError(
                    code: .timeout,
                    message: "no reply within the request timeout of \(node.requestTimeout): the node may be "
                        + "overloaded or stopped",
                    node: node.id
                )
            )
        }
        if connectTimedOut {
            let failure = CachetClientError(
                code: .timeout,
                message: "could not connect within the connect timeout of \(node.connectTimeout)",
                node: node.id
            )
            let hadSocket = state.withLock { $0.generation == generation && $0.fd >= 0 }
            if hadSocket {
                closeSocket(generation: generation, failure: failure)
            } else {
                let waiters = state.withLock { $0.machine.closed() }
                fail(waiters, with: failure)
            }
            node.connectFailed()
        }
        // Shut-down slots whose last request is answered close their socket.
        let finished = state.withLock { $0.machine.state == .shutdown && $0.fd >= 0 }
        if finished {
            closeSocket(generation: generation, failure: node.shutdownError())
        }
        return waiters.count
    }

    private func fail(_ waiters: [ClientWaiter], with failure: CachetClientError) {
        for waiter in waiters { waiter.resume(.failure(failure), node: node) }
    }
}
