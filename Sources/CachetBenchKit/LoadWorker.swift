import CachetIO
import Histogram

#if canImport(Glibc)
import Glibc
#endif

/// One load thread: its connections (``BenchChannel``s) on a `CachetEventLoop` of its own, and what a phase
/// needs to drive them: requests written as replies come (closed loop, `--pipeline` in flight per
/// connection) or on a fixed schedule (open loop, `--rate`), every reply counted and its latency recorded
/// from the moment its request was written (or, paced, was due).
///
/// Generic over the protocol, so that requests and replies are encoded and parsed without existentials.
/// The loop reads the replies and calls ``received(on:)``; the loop's timers end a phase at its deadline,
/// send paced requests when due, and give up on a server that has not answered for 10 s. While requests
/// go as fast as replies come, the loop lingers in `epoll_wait` after each batch (as a thread of its own
/// would) instead of handing the queue back to Dispatch; while paced it does not, so that its timers fire
/// on time.
///
/// `@unchecked Sendable`: made on the calling thread, which hands it its sockets (``register(_:)``); from
/// then on every property but the immutable ones is touched on the loop's queue only, where ``run(_:then:)``
/// starts each phase. Phases never overlap.
final class LoadWorker<Driver: BenchProtocolDriver>: @unchecked Sendable {
    /// What the progress line reads.
    let counters = WorkerCounters()
    let loop: CachetEventLoop
    private let driver: Driver
    private let data: BenchDataSet
    private let chooser: KeyChooser
    private let pipeline: Int
    /// Keys each read asks for (``BenchConfiguration/keysPerGet``).
    private let keysPerGet: Int
    private let getRatio: Double
    /// With `--prefill`, every read must hit with the value's length.
    private let verify: Bool
    private let requestBound: Int
    /// Nanoseconds between two requests of this worker with `--rate`; 0 without.
    private let interval: UInt64
    /// Where the key of the request being written is spelled out.
    private let keyScratch = UnsafeMutableRawPointer.allocate(byteCount: 256, alignment: 16)
    private var channels: [BenchChannel<Driver>] = []
    private var random: BenchRandom

    /// How long the loop waits in `epoll_wait` for more replies after a batch, while not pacing.
    private static var lingerMilliseconds: Int32 { 100 }
    /// How often the counters are published while replies come.
    private static var countersInterval: UInt64 { 10_000_000 }
    /// How often the latencies of the last moments are handed to the progress line.
    private static var recentInterval: UInt64 { 200_000_000 }
    /// How long a server may leave requests unanswered before the phase fails.
    private static var silenceLimit: UInt64 { 10_000_000_000 }

    // The phase.
    private var finished: (@Sendable (WorkerResult) -> Void)?
    private var result = WorkerResult()
    private var recent = makeLatencyHistogram()
    private var outstanding = 0
    private var prefilling = false
    private var prefillNext: [Int] = []
    private var prefillEnd: [Int] = []
    private var prefillLeft = 0
    private var deadline = UInt64.max
    private var budget = Int.max
    private var issued = 0
    private var recording = false
    /// Whether this phase follows the schedule (measure phases with `--rate`).
    private var pacing = false
    /// When the schedule means to send the next request (monotonic ns), while pacing.
    private var nextScheduled: UInt64 = 0
    /// The connection the next scheduled request is offered to first.
    private var pacingCursor = 0
    private var lastReply: UInt64 = 0
    /// When the loop found the channel being served ready (``BenchChannel/handleEvents(_:)``): the time
    /// its replies count as received.
    var readyAt: UInt64 = 0
    private var nextCountersPublish: UInt64 = 0
    private var nextRecentPublish: UInt64 = 0
    /// A connection that broke, or bytes nobody asked for, between phases: the next phase fails with it.
    private var pendingFailure: BenchError?
    private var pacingTimer: CachetTimerID?
    private var deadlineTimer: CachetTimerID?
    private var silenceTimer: CachetTimerID?

    // Counts not yet published.
    private var batchReplies = 0
    private var batchHits = 0
    private var batchMisses = 0
    private var batchErrors = 0
    private var batchVerificationErrors = 0

    /// Creates the worker and its loop (not started).
    /// - Parameters:
    ///   - index: the worker's number, for the loop's label.
    ///   - driver: the protocol.
    ///   - data: the keys and the value.
    ///   - chooser: how keys are drawn.
    ///   - configuration: the run's settings.
    ///   - seed: the random generator's seed.
    /// - Throws: ``BenchError`` `connectionFailed` when the loop's descriptors cannot be created.
    init(
        index: Int,
        driver: Driver,
        data: BenchDataSet,
        chooser: KeyChooser,
        configuration: BenchConfiguration,
        seed: UInt64
    ) throws(BenchError) {
        do {
            // Default QoS, whose threads run at nice 0 as a thread of the process would (Dispatch gives
            // user-initiated ones nice -2, above the server under test where the two share a core).
            loop = try CachetEventLoop(
                label: "cachet.bench.\(index)",
                lingerMilliseconds: Int(Self.lingerMilliseconds),
                qos: .default
            )
        } catch {
            throw BenchError(.connectionFailed, "cannot create a load thread's event loop: \(error.message)")
        }
        self.driver = driver
        self.data = data
        self.chooser = chooser
        pipeline = configuration.pipeline
        getRatio = configuration.getRatio
        keysPerGet = configuration.keysPerGet
        verify = configuration.prefill
        requestBound = max(
            driver.requestLengthBound(keyLength: data.keyLength, valueLength: data.value.count),
            driver.multiGetLengthBound(keyLength: data.keyLength, keyCount: configuration.keysPerGet)
        )
        interval = configuration.rate.map { UInt64(max(1, (Double(configuration.threads) / $0 * 1e9).rounded())) } ?? 0
        random = BenchRandom(seed: seed)
    }

    deinit {
        keyScratch.deallocate()
    }

    /// Starts the loop and hands it the connections, which it owns from then on.
    /// - Parameter sockets: connected sockets (their TLS handshakes done) and the server each goes to.
    func register(_ sockets: [(fd: Int32, tls: CachetTLSSession?, target: Int)]) {
        loop.start()
        loop.executeAndWait {
            for socket in sockets {
                let channel = BenchChannel(
                    worker: self,
                    target: socket.target,
                    pipeline: pipeline,
                    requestBound: requestBound
                )
                if let tls = socket.tls { channel.useTLS(session: tls) }
                channels.append(channel)
                loop.register(channel, fd: socket.fd, isNonBlocking: true)
            }
        }
    }

    /// Closes every connection and stops the loop.
    func close() {
        loop.stop()
        loop.executeAndWait { channels = [] }
    }

    // MARK: Phases (on the loop)

    /// Runs `phase` on the loop; `finished` gets what was measured (with `failure` set when a server broke
    /// the protocol or the connection), on the loop's queue.
    func run(_ phase: WorkerPhase, then finished: @escaping @Sendable (WorkerResult) -> Void) {
        loop.execute { self.begin(phase, finished) }
    }

    private func begin(_ phase: WorkerPhase, _ finished: @escaping @Sendable (WorkerResult) -> Void) {
        self.finished = finished
        result = WorkerResult()
        recent.reset()
        outstanding = 0
        issued = 0
        prefilling = false
        pacing = false
        recording = false
        deadline = .max
        budget = .max
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
            if pacing { nextScheduled = monotonicNanoseconds() }
        }
        if let failure = pendingFailure {
            pendingFailure = nil
            fail(failure)
            return
        }
        // A paced request's latency counts from its scheduled time, so the timer that sends it must fire
        // on time: in the lingering handler, or from Dispatch without its default leeway.
        loop.lingersThroughTimers = pacing
        loop.timerLeeway = pacing ? .microseconds(1) : .microseconds(100)

        let start = monotonicNanoseconds()
        lastReply = start
        nextCountersPublish = start + Self.countersInterval
        nextRecentPublish = start + Self.recentInterval
        for channel in channels {
            refill(channel, now: start)
            channel.flush()
            // A send that failed closed the channel, and `closed` ended the phase.
            guard isRunning else { return }
        }
        if deadline != .max {
            deadlineTimer = loop.schedule(after: .nanoseconds(Int64(clamping: deadline &- min(deadline, start)))) {
                [unowned self] in
                deadlineTimer = nil
                finishIfDone(now: monotonicNanoseconds())
            }
        }
        watchForSilence()
        if pacing {
            sendScheduled(now: start)
            armPacingTimer(now: start)
        }
        finishIfDone(now: start)
    }

    /// Whether a phase is under way.
    private var isRunning: Bool { finished != nil }

    @inline(__always)
    private func workLeft(now: UInt64) -> Bool {
        prefilling ? prefillLeft > 0 : issued < budget && now < deadline
    }

    /// Ends the phase once every request is answered and none is left to send.
    private func finishIfDone(now: UInt64) {
        guard isRunning, outstanding == 0, !workLeft(now: now) else { return }
        publish()
        finish()
    }

    private func fail(_ failure: BenchError) {
        publish()
        result.failure = failure
        finish()
    }

    private func finish() {
        for timer in [pacingTimer, deadlineTimer, silenceTimer] {
            if let timer { loop.cancelTimer(timer) }
        }
        (pacingTimer, deadlineTimer, silenceTimer) = (nil, nil, nil)
        if recording { counters.recent.withLock { [recent] in $0.add(recent) } }
        recent.reset()
        let finished = finished
        self.finished = nil
        finished?(result)
    }

    /// Fails the phase when requests have waited 10 s for a reply; checked every second.
    private func watchForSilence() {
        silenceTimer = loop.schedule(after: .seconds(1)) { [unowned self] in
            silenceTimer = nil
            guard isRunning else { return }
            if outstanding > 0 && monotonicNanoseconds() > lastReply + Self.silenceLimit {
                fail(BenchError(.repliesMissing, "no reply for 10 s with \(outstanding) request(s) in flight"))
                return
            }
            watchForSilence()
        }
    }

    private func publish() {
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

    // MARK: Pacing

    /// Sends the requests whose scheduled time has come, offering them to the connections in turn from
    /// `pacingCursor`; those that find every pipeline full wait for a reply (and keep their scheduled time).
    private func sendScheduled(now: UInt64) {
        var step = 0
        let count = channels.count
        while nextScheduled <= now && step < count && workLeft(now: now) && isRunning {
            let channel = channels[(pacingCursor + step) % count]
            refill(channel, now: now)
            channel.flush()
            step += 1
        }
        if count > 0 { pacingCursor = (pacingCursor + 1) % count }
    }

    /// Sets a timer for the next scheduled request, unless one is set, or the request is due already and
    /// waits for a pipeline to have room (a reply sends it).
    private func armPacingTimer(now: UInt64) {
        guard isRunning, pacing, pacingTimer == nil, workLeft(now: now), nextScheduled > now else { return }
        pacingTimer = loop.schedule(after: .nanoseconds(Int64(nextScheduled - now)), pacingWork)
    }

    /// What the pacing timer runs: one closure for every timer, so that scheduling one allocates nothing.
    private lazy var pacingWork: () -> Void = { [unowned self] in
        pacingTimer = nil
        let now = monotonicNanoseconds()
        sendScheduled(now: now)
        armPacingTimer(now: now)
        finishIfDone(now: now)
    }

    // MARK: Requests and replies (on the loop)

    /// Writes requests until the connection's pipeline is full or the phase's work is done (the caller
    /// flushes).
    @inline(__always)
    private func refill(_ channel: BenchChannel<Driver>, now: UInt64) {
        while channel.inFlight < pipeline {
            let target = channel.target
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
            channel.output.reserveWritable(requestBound)
            let destination = channel.output.writePointer
            let written: Int
            if read && keysPerGet > 1 {
                // The first key as chosen, the others drawn the same way (from the same server's keys).
                written = driver.writeGet(
                    keyCount: keysPerGet,
                    key: { [self] index in
                        var other = key
                        if index > 0 {
                            other = chooser.next(&random)
                            while data.targetCount > 1 && data.target(ofKey: other) != target {
                                other = chooser.next(&random)
                            }
                        }
                        return data.key(other, in: keyScratch)
                    },
                    to: destination
                )
            } else {
                let keyBytes = data.key(key, in: keyScratch)
                written =
                    read
                    ? driver.writeGet(key: keyBytes, to: destination)
                    : driver.writeSet(key: keyBytes, value: data.value, to: destination)
            }
            channel.output.moveWriteIndex(forwardBy: written)
            channel.push(sentAt: sentAt, read: read)
            outstanding += 1
        }
    }

    /// Counts every whole reply the channel's input holds, then writes the requests that take their
    /// place. Called by the channel on each read.
    func received(on channel: BenchChannel<Driver>) {
        let now = readyAt
        let bytes = channel.input.wholeRegion
        var offset = channel.input.readIndex
        let valueLength = data.value.count
        var failure: BenchError?
        var counted = 0
        while offset < bytes.count {
            guard channel.inFlight > 0 else {
                failure = BenchError(.malformedReply, "server \(channel.target) sent bytes nobody asked for")
                break
            }
            let parsed: (reply: BenchReply, end: Int)?
            do throws(BenchError) {
                parsed = try driver.parseReply(bytes, at: offset)
            } catch {
                failure = error
                break
            }
            guard let (reply, end) = parsed else { break }
            offset = end
            let (sentAt, wasRead) = channel.pop()
            outstanding -= 1
            counted += 1
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
                batchMisses += keysPerGet - 1
                if !wasRead || (verify && (length != valueLength || keysPerGet > 1)) { batchVerificationErrors += 1 }
            case .hits(let count, let bytes):
                batchHits += count
                batchMisses += max(0, keysPerGet - count)
                if !wasRead || count > keysPerGet || (verify && (count != keysPerGet || bytes != count * valueLength)) {
                    batchVerificationErrors += 1
                }
            case .miss:
                batchMisses += keysPerGet
                if !wasRead || verify { batchVerificationErrors += 1 }
            case .stored:
                if wasRead { batchVerificationErrors += 1 }
            case .error:
                batchErrors += 1
            }
        }
        batchReplies += counted
        // Everything parsed empties the buffer, which starts over at offset 0.
        channel.input.moveReadIndex(to: offset)
        if let failure {
            channel.input.clear()
            if isRunning { fail(failure) } else { pendingFailure = pendingFailure ?? failure }
            return
        }
        guard isRunning else { return }
        if counted > 0 { lastReply = now }
        refill(channel, now: now)
        channel.flush()
        guard isRunning else { return }
        if pacing {
            sendScheduled(now: now)
            armPacingTimer(now: now)
        }
        if now >= nextCountersPublish {
            nextCountersPublish = now + Self.countersInterval
            publish()
        }
        if recording && now >= nextRecentPublish {
            nextRecentPublish = now + Self.recentInterval
            let interval = recent
            counters.recent.withLock { $0.add(interval) }
            recent.reset()
        }
        finishIfDone(now: now)
    }

    /// A connection closed: the server closed it, a read or a send failed on it, or the loop stopped.
    func closed(_ channel: BenchChannel<Driver>, error: CachetIOError?) {
        guard error?.code != .loopStopped else { return }
        let reason: String
        if let error, error.systemError != 0 {
            reason = "failed: \(String(cString: strerror(error.systemError)))"
        } else {
            reason = "closed the connection"
        }
        let failure = BenchError(
            .connectionLost,
            "server \(channel.target) \(reason) with \(channel.inFlight) request(s) in flight"
        )
        if isRunning { fail(failure) } else { pendingFailure = pendingFailure ?? failure }
    }
}
