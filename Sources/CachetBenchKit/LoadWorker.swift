import CEpoll
import Histogram
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Counters one worker publishes for the progress line (relaxed atomics, added once per batch).
final class WorkerCounters: Sendable {
    let replies = Atomic<Int>(0)
    let hits = Atomic<Int>(0)
    let misses = Atomic<Int>(0)
    let errors = Atomic<Int>(0)
}

/// What one worker measured.
struct WorkerResult: Sendable {
    var histogram = Histogram<UInt64>(
        lowestDiscernibleValue: 1,
        highestTrackableValue: 60_000_000_000,
        numberOfSignificantValueDigits: .three
    )
    var replies = 0
    var hits = 0
    var misses = 0
    var errors = 0
    var verificationErrors = 0
    var failure: String?
}

@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// One connection of a worker: reusable buffers and a ring of in-flight send times.
final class BenchConnection {
    let fd: Int32
    var output: [UInt8] = []
    var sent = 0
    var input: [UInt8]
    var inputStart = 0
    var inputEnd = 0
    var sendTimes: [UInt64]
    var isRead: [Bool]
    var ringHead = 0
    var inFlight = 0
    var writeInterest = false

    init(fd: Int32, pipeline: Int) {
        self.fd = fd
        input = [UInt8](repeating: 0, count: 256 * 1024)
        sendTimes = [UInt64](repeating: 0, count: pipeline)
        isRead = [Bool](repeating: false, count: pipeline)
        output.reserveCapacity(64 * 1024)
    }

    deinit { close(fd) }

    func push(sentAt time: UInt64, read: Bool) {
        let slot = (ringHead + inFlight) % sendTimes.count
        sendTimes[slot] = time
        isRead[slot] = read
        inFlight += 1
    }

    func pop() -> (time: UInt64, read: Bool) {
        let entry = (sendTimes[ringHead], isRead[ringHead])
        ringHead = (ringHead + 1) % sendTimes.count
        inFlight -= 1
        return entry
    }
}

/// Opens a non-blocking TCP connection with TCP_NODELAY.
func openConnection(host: String, port: Int) throws(BenchError) -> Int32 {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
    guard inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host, &address.sin_addr) == 1 else {
        throw BenchError(message: "'\(host)' is not an IPv4 address")
    }
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw BenchError(message: "socket failed: \(String(cString: strerror(errno)))") }
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard result == 0 else {
        let message = String(cString: strerror(errno))
        close(fd)
        throw BenchError(message: "cannot connect to \(host):\(port): \(message)")
    }
    var one: Int32 = 1
    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    return fd
}

/// The phase a worker runs.
enum WorkerPhase {
    /// Write keys `range` once each.
    case prefill(Range<Int>)
    /// Random reads and writes until `deadline` (monotonic ns) or `budget` requests.
    case measure(deadline: UInt64?, budget: Int?)
}

/// Drives a set of connections with one epoll loop on the calling thread.
struct LoadWorker<Driver: BenchProtocolDriver> {
    let driver: Driver
    let configuration: BenchConfiguration
    let keys: [[UInt8]]
    let value: [UInt8]
    let chooser: KeyChooser
    let counters: WorkerCounters
    let verify: Bool

    func run(connections: [BenchConnection], phase: WorkerPhase, seed: UInt64) -> WorkerResult {
        var result = WorkerResult()
        var random = BenchRandom(seed: seed)
        let epoll = cachet_epoll_create()
        defer { close(epoll) }
        let events = cachet_epoll_events_create(64)
        defer { cachet_epoll_events_free(events) }
        for (index, connection) in connections.enumerated() {
            _ = cachet_epoll_add(epoll, connection.fd, cachet_EPOLLIN, UInt64(index))
        }

        var nextPrefill = 0
        var prefillEnd = 0
        var prefillStart = 0
        var deadline: UInt64? = nil
        var budget = Int.max
        switch phase {
        case .prefill(let range):
            prefillStart = range.lowerBound
            nextPrefill = range.lowerBound
            prefillEnd = range.upperBound
        case .measure(let end, let limit):
            deadline = end
            budget = limit ?? Int.max
        }
        let prefilling: Bool
        if case .prefill = phase { prefilling = true } else { prefilling = false }
        _ = prefillStart
        var issued = 0

        // Appends requests until the connection's pipeline is full or the work is done.
        func refill(_ connection: BenchConnection, now: UInt64) {
            while connection.inFlight < configuration.pipeline {
                if prefilling {
                    guard nextPrefill < prefillEnd else { return }
                    driver.appendSet(key: keys[nextPrefill], value: value, to: &connection.output)
                    nextPrefill += 1
                    connection.push(sentAt: now, read: false)
                } else {
                    guard issued < budget else { return }
                    if let deadline, now >= deadline { return }
                    let key = keys[chooser.next(&random)]
                    let read = random.nextUnit() < configuration.getRatio
                    if read {
                        driver.appendGet(key: key, to: &connection.output)
                    } else {
                        driver.appendSet(key: key, value: value, to: &connection.output)
                    }
                    issued += 1
                    connection.push(sentAt: now, read: read)
                }
            }
        }

        // Sends pending output; arms EPOLLOUT while some is left. False on a broken connection.
        func flush(_ connection: BenchConnection, index: Int) -> Bool {
            while connection.sent < connection.output.count {
                let n = connection.output.withUnsafeBytes {
                    cachet_send(connection.fd, $0.baseAddress! + connection.sent, UInt($0.count - connection.sent))
                }
                if n > 0 {
                    connection.sent += n
                } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                    if !connection.writeInterest {
                        connection.writeInterest = true
                        _ = cachet_epoll_modify(epoll, connection.fd, cachet_EPOLLIN | cachet_EPOLLOUT, UInt64(index))
                    }
                    return true
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return false
                }
            }
            connection.output.removeAll(keepingCapacity: true)
            connection.sent = 0
            if connection.writeInterest {
                connection.writeInterest = false
                _ = cachet_epoll_modify(epoll, connection.fd, cachet_EPOLLIN, UInt64(index))
            }
            return true
        }

        let start = monotonicNanoseconds()
        for (index, connection) in connections.enumerated() {
            refill(connection, now: start)
            if !flush(connection, index: index) {
                result.failure = "the server closed a connection"
                return result
            }
        }

        var batchReplies = 0
        var batchHits = 0
        var batchMisses = 0
        var batchErrors = 0
        while true {
            let outstanding = connections.reduce(0) { $0 + $1.inFlight }
            let now = monotonicNanoseconds()
            let workLeft =
                prefilling ? nextPrefill < prefillEnd : (issued < budget && (deadline.map { now < $0 } ?? true))
            if outstanding == 0 && !workLeft { break }
            if let deadline, now > deadline + 5_000_000_000 {
                result.failure = "\(outstanding) replies still missing 5 s after the end"
                break
            }
            let count = cachet_epoll_wait(epoll, events, 64, 50)
            if count < 0 && errno != EINTR { break }
            let received = monotonicNanoseconds()
            for i in 0..<max(count, 0) {
                let index = Int(cachet_epoll_event_token(events, i))
                let connection = connections[index]
                let mask = cachet_epoll_event_mask(events, i)
                if mask & cachet_EPOLLOUT != 0 && !flush(connection, index: index) {
                    result.failure = "the server closed a connection"
                    return result
                }
                guard mask & (cachet_EPOLLIN | cachet_EPOLLHUP | cachet_EPOLLERR) != 0 else { continue }
                // Read what is there.
                while true {
                    if connection.inputEnd == connection.input.count {
                        if connection.inputStart > 0 {
                            let live = connection.inputEnd - connection.inputStart
                            connection.input.withUnsafeMutableBytes { bytes in
                                _ = memmove(bytes.baseAddress!, bytes.baseAddress! + connection.inputStart, live)
                            }
                            connection.inputStart = 0
                            connection.inputEnd = live
                        } else {
                            connection.input += [UInt8](repeating: 0, count: connection.input.count)
                        }
                    }
                    let n = connection.input.withUnsafeMutableBytes {
                        read(connection.fd, $0.baseAddress! + connection.inputEnd, $0.count - connection.inputEnd)
                    }
                    if n > 0 {
                        connection.inputEnd += n
                        if connection.inputEnd < connection.input.count { break }
                        continue
                    }
                    if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
                    if n < 0 && errno == EINTR { continue }
                    result.failure = "the server closed a connection with \(connection.inFlight) replies missing"
                    return result
                }
                // Parse every whole reply.
                var parseFailure: BenchError?
                connection.input.withUnsafeBytes { whole in
                    let bytes = UnsafeRawBufferPointer(rebasing: whole[0..<connection.inputEnd])
                    while connection.inFlight > 0 {
                        let parsed: (reply: BenchReply, end: Int)?
                        do throws(BenchError) {
                            parsed = try driver.parseReply(bytes, at: connection.inputStart)
                        } catch {
                            parseFailure = error
                            return
                        }
                        guard let (reply, end) = parsed else { return }
                        connection.inputStart = end
                        let (sentAt, wasRead) = connection.pop()
                        batchReplies += 1
                        if !prefilling { result.histogram.record(received &- sentAt) }
                        switch reply {
                        case .hit(let length):
                            batchHits += 1
                            if verify && length != value.count { result.verificationErrors += 1 }
                        case .miss:
                            batchMisses += 1
                            if verify { result.verificationErrors += 1 }
                        case .stored:
                            if wasRead { result.verificationErrors += 1 }
                        case .error:
                            batchErrors += 1
                        }
                    }
                }
                if let parseFailure {
                    result.failure = parseFailure.message
                    return result
                }
                if connection.inputStart == connection.inputEnd {
                    connection.inputStart = 0
                    connection.inputEnd = 0
                }
                refill(connection, now: received)
                if !flush(connection, index: index) {
                    result.failure = "the server closed a connection"
                    return result
                }
            }
            if batchReplies > 0 {
                counters.replies.add(batchReplies, ordering: .relaxed)
                counters.hits.add(batchHits, ordering: .relaxed)
                counters.misses.add(batchMisses, ordering: .relaxed)
                counters.errors.add(batchErrors, ordering: .relaxed)
                result.replies += batchReplies
                result.hits += batchHits
                result.misses += batchMisses
                result.errors += batchErrors
                (batchReplies, batchHits, batchMisses, batchErrors) = (0, 0, 0, 0)
            }
        }
        return result
    }
}
