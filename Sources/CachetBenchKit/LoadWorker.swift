import CEpoll
import CachetIO
import CachetLocking
import Histogram
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A latency histogram in nanoseconds, from 1 ns to 60 s, three significant digits.
func makeLatencyHistogram() -> Histogram<UInt64> {
    Histogram<UInt64>(
        lowestDiscernibleValue: 1,
        highestTrackableValue: 60_000_000_000,
        numberOfSignificantValueDigits: .three
    )
}

/// What one load thread publishes for the progress line: counters added once per batch, and the
/// latencies of the last moments, handed over a few times a second.
final class WorkerCounters: Sendable {
    let replies = Atomic<Int>(0)
    let hits = Atomic<Int>(0)
    let misses = Atomic<Int>(0)
    let errors = Atomic<Int>(0)
    let verificationErrors = Atomic<Int>(0)
    /// The latencies of the current progress interval, added by a load thread and taken by the progress
    /// reporter.
    let recent = CachetLock(makeLatencyHistogram())

    /// Zeroes everything before a phase.
    func reset() {
        replies.store(0, ordering: .relaxed)
        hits.store(0, ordering: .relaxed)
        misses.store(0, ordering: .relaxed)
        errors.store(0, ordering: .relaxed)
        verificationErrors.store(0, ordering: .relaxed)
        recent.withLock { $0.reset() }
    }
}

/// What one load thread measured in one phase.
struct WorkerResult: Sendable {
    /// Every request's latency.
    var histogram = makeLatencyHistogram()
    /// Reads' latencies alone.
    var getHistogram = makeLatencyHistogram()
    /// Writes' latencies alone.
    var putHistogram = makeLatencyHistogram()
    var replies = 0
    var hits = 0
    var misses = 0
    var errors = 0
    var verificationErrors = 0
    var failure: BenchError?

    mutating func add(_ other: WorkerResult) {
        histogram.add(other.histogram)
        getHistogram.add(other.getHistogram)
        putHistogram.add(other.putHistogram)
        replies += other.replies
        hits += other.hits
        misses += other.misses
        errors += other.errors
        verificationErrors += other.verificationErrors
        if failure == nil { failure = other.failure }
    }
}

/// What a load thread does in one phase.
enum WorkerPhase: Sendable {
    /// Write every key of `positions[target]` (positions in that server's key list) once.
    case prefill(positions: [Range<Int>])
    /// Random reads and writes until `deadline` (monotonic ns) or `budget` requests; latencies are
    /// recorded when `record` is set (not while warming up).
    case measure(deadline: UInt64?, budget: Int?, record: Bool)
}

/// One load thread's connections and epoll set. Its memory is plain structs behind pointers, so that the
/// event loop touches no reference counts.
///
/// `@unchecked Sendable`: the object is created on the calling thread, then handed to exactly one load
/// thread per phase (phases never overlap), and closed on the calling thread after the last phase.
final class BenchLoadThread: @unchecked Sendable {
    let connections: UnsafeMutableBufferPointer<BenchConnectionState>
    let epoll: Int32
    let events: UnsafeMutablePointer<epoll_event>
    let eventCapacity: Int32 = 256
    let counters = WorkerCounters()
    var random: BenchRandom
    /// Where the key of the request being written is spelled out.
    let keyScratch = UnsafeMutableRawPointer.allocate(byteCount: 256, alignment: 16)

    /// Takes ownership of the sockets in `sockets` and registers them for reading.
    /// - Parameters:
    ///   - sockets: connected sockets and the index of the server each goes to.
    ///   - pipeline: requests in flight per connection.
    ///   - requestBound: the most bytes one request takes.
    ///   - seed: the random generator's seed.
    init(sockets: [(fd: Int32, tls: CachetTLSSession?, target: Int)], pipeline: Int, requestBound: Int, seed: UInt64) {
        connections = .allocate(capacity: sockets.count)
        for (index, socket) in sockets.enumerated() {
            (connections.baseAddress! + index).initialize(
                to: BenchConnectionState(
                    fd: socket.fd,
                    tls: socket.tls,
                    target: socket.target,
                    pipeline: pipeline,
                    requestBound: requestBound
                )
            )
        }
        epoll = cachet_epoll_create()
        events = cachet_epoll_events_create(eventCapacity)
        random = BenchRandom(seed: seed)
        for index in 0..<sockets.count {
            _ = cachet_epoll_add(epoll, sockets[index].fd, cachet_EPOLLIN, UInt64(index))
        }
    }

    deinit {
        // Each state closes its socket and frees its buffers.
        connections.baseAddress?.deinitialize(count: connections.count)
        connections.deallocate()
        cachet_epoll_events_free(events)
        keyScratch.deallocate()
        _ = close(epoll)
    }
}

/// The event loop of one load thread for one phase, generic over the protocol so that requests and
/// replies are encoded and parsed without dynamic dispatch.
struct LoadLoop<Driver: BenchProtocolDriver> {
    let driver: Driver
    let data: BenchDataSet
    let chooser: KeyChooser
    let pipeline: Int
    let getRatio: Double
    /// With `--prefill`, every read must hit with the value's length.
    let verify: Bool
    let thread: BenchLoadThread

    private let connections: UnsafeMutablePointer<BenchConnectionState>
    private let keyScratch: UnsafeMutableRawPointer
    private let connectionCount: Int
    private let requestBound: Int
    private var random: BenchRandom
    private var result = WorkerResult()
    private var recent = makeLatencyHistogram()
    private var outstanding = 0

    // The phase.
    private var prefilling = false
    private var prefillNext: [Int] = []
    private var prefillEnd: [Int] = []
    private var prefillLeft = 0
    private var deadline = UInt64.max
    private var budget = Int.max
    private var issued = 0
    private var recording = false
    /// Nanoseconds between two requests of this thread with `--rate`; 0 without.
    private let interval: UInt64
    /// Whether this phase follows the schedule (measure phases with `--rate`).
    private var pacing = false
    /// When the schedule means to send the next request (monotonic ns), while pacing.
    private var nextScheduled: UInt64 = 0
    /// The connection the next scheduled request is offered to first.
    private var pacingCursor = 0

    // Counts not yet published.
    private var batchReplies = 0
    private var batchHits = 0
    private var batchMisses = 0
    private var batchErrors = 0
    private var batchVerificationErrors = 0

    init(
        driver: Driver,
        data: BenchDataSet,
        chooser: KeyChooser,
        configuration: BenchConfiguration,
        thread: BenchLoadThread
    ) {
        self.driver = driver
        self.data = data
        self.chooser = chooser
        self.pipeline = configuration.pipeline
        self.getRatio = configuration.getRatio
        self.verify = configuration.prefill
        self.thread = thread
        connections = thread.connections.baseAddress!
        keyScratch = thread.keyScratch
        connectionCount = thread.connections.count
        requestBound = driver.requestLengthBound(keyLength: data.keyLength, valueLength: data.value.count)
        random = thread.random
        interval = configuration.rate.map { UInt64(max(1, (Double(configuration.threads) / $0 * 1e9).rounded())) } ?? 0
    }

    /// Runs `phase` to its end on the calling thread.
    /// - Returns: what was measured, with `failure` set when a server broke the protocol or the connection.
    mutating func run(_ phase: WorkerPhase) -> WorkerResult {
        switch phase {
        case .prefill(let positions):
            prefilling = true
            prefillNext = positions.map(\.lowerBound)
            prefillEnd = positions.map(\.upperBound)
            prefillLeft = positions.reduce(0) { $0 + $1.count }
        case .measure(let end, let limit, let record):
            deadline = end ?? .max
            budget = limit ?? .max
            recording = record
            pacing = interval > 0
            if pacing {
                // Timed waits of a few microseconds must not end 50 µs late (the default slack).
                cachet_set_timer_slack_ns(1_000)
                nextScheduled = monotonicNanoseconds()
            }
        }
        defer { thread.random = random }

        let start = monotonicNanoseconds()
        for index in 0..<connectionCount {
            refill(index, now: start)
            if let failure = flush(index) { return failed(failure) }
        }
        var lastReply = start
        var nextPublish = start + 200_000_000
        // While pacing: every connection's pipeline is full, so the next request waits for a reply.
        var scheduleBlocked = false
        while true {
            let now = monotonicNanoseconds()
            if outstanding == 0 && !workLeft(now: now) { break }
            if outstanding > 0 && now > lastReply + 10_000_000_000 {
                return failed(
                    BenchError(.repliesMissing, "no reply for 10 s with \(outstanding) request(s) in flight")
                )
            }
            let count: Int32
            if pacing && !scheduleBlocked && workLeft(now: now) {
                let wait = nextScheduled > now ? min(nextScheduled - now, 100_000_000) : 0
                count = cachet_epoll_wait_ns(thread.epoll, thread.events, thread.eventCapacity, Int64(wait))
            } else {
                count = cachet_epoll_wait(thread.epoll, thread.events, thread.eventCapacity, 100)
            }
            if count < 0 && errno != EINTR {
                return failed(BenchError(.connectionLost, "epoll_wait failed: \(String(cString: strerror(errno)))"))
            }
            let received = monotonicNanoseconds()
            for event in 0..<Int32(max(count, 0)) {
                let index = Int(cachet_epoll_event_token(thread.events, event))
                let mask = cachet_epoll_event_mask(thread.events, event)
                if mask & cachet_EPOLLOUT != 0, let failure = flush(index) { return failed(failure) }
                guard mask & (cachet_EPOLLIN | cachet_EPOLLHUP | cachet_EPOLLERR) != 0 else { continue }
                if let failure = receive(index, now: received) { return failed(failure) }
                refill(index, now: received)
                if let failure = flush(index) { return failed(failure) }
            }
            if pacing {
                switch sendScheduled() {
                case .failure(let failure): return failed(failure)
                case .blocked(let blocked): scheduleBlocked = blocked
                }
            }
            if batchReplies > 0 {
                lastReply = received
                publish()
            }
            if recording && received >= nextPublish {
                nextPublish = received + 200_000_000
                let interval = recent
                thread.counters.recent.withLock { $0.add(interval) }
                recent.reset()
            }
        }
        if recording { thread.counters.recent.withLock { [recent] in $0.add(recent) } }
        return result
    }

    private enum ScheduleOutcome {
        case failure(BenchError)
        /// Whether requests are due that found every pipeline full: they wait for a reply.
        case blocked(Bool)
    }

    /// Sends the requests whose scheduled time has come, offering them to the connections in turn from
    /// `pacingCursor`; those that find every pipeline full wait for a reply (and keep their scheduled time).
    private mutating func sendScheduled() -> ScheduleOutcome {
        let now = monotonicNanoseconds()
        var step = 0
        while nextScheduled <= now && step < connectionCount && workLeft(now: now) {
            let index = (pacingCursor + step) % connectionCount
            refill(index, now: now)
            if let failure = flush(index) { return .failure(failure) }
            step += 1
        }
        pacingCursor = (pacingCursor + 1) % connectionCount
        return .blocked(nextScheduled <= now && workLeft(now: now))
    }

    private mutating func failed(_ failure: BenchError) -> WorkerResult {
        publish()
        result.failure = failure
        return result
    }

    private mutating func publish() {
        let counters = thread.counters
        counters.replies.add(batchReplies, ordering: .relaxed)
        counters.hits.add(batchHits, ordering: .relaxed)
        counters.misses.add(batchMisses, ordering: .relaxed)
        counters.errors.add(batchErrors, ordering: .relaxed)
        counters.verificationErrors.add(batchVerificationErrors, ordering: .relaxed)
        result.replies += batchReplies
        result.hits += batchHits
        result.misses += batchMisses
        result.errors += batchErrors
        result.verificationErrors += batchVerificationErrors
        (batchReplies, batchHits, batchMisses, batchErrors, batchVerificationErrors) = (0, 0, 0, 0, 0)
    }

    @inline(__always)
    private func workLeft(now: UInt64) -> Bool {
        prefilling ? prefillLeft > 0 : issued < budget && now < deadline
    }

    /// Writes requests until the connection's pipeline is full or the phase's work is done.
    @inline(__always)
    private mutating func refill(_ index: Int, now: UInt64) {
        let connection = connections + index
        while connection.pointee.inFlight < pipeline {
            let target = connection.pointee.target
            let key: Int
            let read: Bool
            var sentAt = now
            if prefilling {
                guard prefillNext[target] < prefillEnd[target] else { return }
                key = data.key(ofTarget: target, at: prefillNext[target])
                prefillNext[target] += 1
                prefillLeft -= 1
                read = false
            } else {
                guard issued < budget && now < deadline, !pacing || nextScheduled <= now else { return }
                var candidate = chooser.next(&random)
                if data.targetCount > 1 {
                    // A server that owns no key gets no request (and a scheduled one goes to another).
                    guard data.keyCount(ofTarget: target) > 0 else { return }
                    while data.target(ofKey: candidate) != target { candidate = chooser.next(&random) }
                }
                if pacing {
                    sentAt = nextScheduled
                    nextScheduled += interval
                }
                key = candidate
                read = random.nextUnit() < getRatio
                issued += 1
            }
            connection.pointee.output.reserveWritable(requestBound)
            let destination = connection.pointee.output.writePointer
            let keyBytes = data.key(key, in: keyScratch)
            let written =
                read
                ? driver.writeGet(key: keyBytes, to: destination)
                : driver.writeSet(key: keyBytes, value: data.value, to: destination)
            connection.pointee.output.moveWriteIndex(forwardBy: written)
            connection.pointee.push(sentAt: sentAt, read: read)
            outstanding += 1
        }
    }

    /// Sends pending output; arms EPOLLOUT while some is left.
    /// - Returns: nil, or the failure when the connection broke.
    @inline(__always)
    private func flush(_ index: Int) -> BenchError? {
        let connection = connections + index
        while connection.pointee.output.readableBytes > 0 {
            let pending = connection.pointee.output.readableRegion
            var n: Int
            if let tls = connection.pointee.tls {
                switch tls.write(pending) {
                case .bytes(let sent): n = sent
                case .wouldBlock:
                    n = -1
                    errno = EAGAIN
                case .endOfStream, .failed(_):
                    n = -1
                    errno = EPIPE
                }
            } else {
                n = cachet_send(connection.pointee.fd, pending.baseAddress, UInt(pending.count))
            }
            if n > 0 {
                // Sending everything empties the buffer, which starts over at offset 0.
                connection.pointee.output.moveReadIndex(forwardBy: n)
            } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                if !connection.pointee.writeInterest {
                    connection.pointee.writeInterest = true
                    _ = cachet_epoll_modify(
                        thread.epoll,
                        connection.pointee.fd,
                        cachet_EPOLLIN | cachet_EPOLLOUT,
                        UInt64(index)
                    )
                }
                return nil
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                return BenchError(
                    .connectionLost,
                    "sending to server \(connection.pointee.target) failed: \(String(cString: strerror(errno)))"
                )
            }
        }
        if connection.pointee.writeInterest {
            connection.pointee.writeInterest = false
            _ = cachet_epoll_modify(thread.epoll, connection.pointee.fd, cachet_EPOLLIN, UInt64(index))
        }
        return nil
    }

    /// Reads what has arrived and counts every whole reply.
    /// - Returns: nil, or the failure when the connection closed or a reply broke the protocol.
    @inline(__always)
    private mutating func receive(_ index: Int, now: UInt64) -> BenchError? {
        let connection = connections + index
        while true {
            // Full: move the unparsed bytes to the front, or, if they fill the buffer, double it.
            if connection.pointee.input.writableBytes == 0 { connection.pointee.input.reserveWritable(1) }
            let room = connection.pointee.input.writableBytes
            var n: Int
            if let tls = connection.pointee.tls {
                switch tls.read(into: connection.pointee.input.writePointer, count: room) {
                case .bytes(let count): n = count
                case .wouldBlock:
                    n = -1
                    errno = EAGAIN
                case .endOfStream: n = 0
                case .failed(let code):
                    n = -1
                    errno = code
                }
            } else {
                n = read(connection.pointee.fd, connection.pointee.input.writePointer, room)
            }
            if n > 0 {
                connection.pointee.input.moveWriteIndex(forwardBy: n)
                if n < room { break }
                continue
            }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
            if n < 0 && errno == EINTR { continue }
            let reason = n == 0 ? "closed the connection" : "failed: \(String(cString: strerror(errno)))"
            return BenchError(
                .connectionLost,
                "server \(connection.pointee.target) \(reason) with \(connection.pointee.inFlight) request(s) in flight"
            )
        }

        let bytes = connection.pointee.input.wholeRegion
        var offset = connection.pointee.input.readIndex
        let valueLength = data.value.count
        while offset < bytes.count {
            guard connection.pointee.inFlight > 0 else {
                return BenchError(.malformedReply, "server \(connection.pointee.target) sent bytes nobody asked for")
            }
            let parsed: (reply: BenchReply, end: Int)?
            do throws(BenchError) {
                parsed = try driver.parseReply(bytes, at: offset)
            } catch {
                return error
            }
            guard let (reply, end) = parsed else { break }
            offset = end
            let (sentAt, wasRead) = connection.pointee.pop()
            outstanding -= 1
            batchReplies += 1
            if recording {
                let latency = now &- sentAt
                result.histogram.record(latency)
                if wasRead {
                    result.getHistogram.record(latency)
                } else {
                    result.putHistogram.record(latency)
                }
                recent.record(latency)
            }
            switch reply {
            case .hit(let length):
                batchHits += 1
                if !wasRead || (verify && length != valueLength) { batchVerificationErrors += 1 }
            case .miss:
                batchMisses += 1
                if !wasRead || verify { batchVerificationErrors += 1 }
            case .stored:
                if wasRead { batchVerificationErrors += 1 }
            case .error:
                batchErrors += 1
            }
        }
        // Everything parsed empties the buffer, which starts over at offset 0.
        connection.pointee.input.moveReadIndex(to: offset)
        return nil
    }
}
