import CachetIO
import CachetLocking
import CachetTestSupport
import Dispatch
import Foundation
import Testing

/// Echoes every byte back: an inbound channel. With a greeting, sends it as soon as it is registered.
final class EchoChannel: CachetChannel, @unchecked Sendable {
    let greeting: [UInt8]

    init(greeting: [UInt8] = []) {
        self.greeting = greeting
        super.init()
    }

    override func channelActive() {
        guard !greeting.isEmpty else { return }
        write(greeting)
        flush()
    }

    override func channelRead() {
        write(input.readableRegion)
        input.moveReadIndex(forwardBy: input.readableBytes)
        flush()
    }
}

/// Records what happens to an outbound channel. Its properties are touched on the loop's queue only; the
/// test reads them through `executeAndWait`.
class RecordingChannel: CachetChannel, @unchecked Sendable {
    var events: [String] = []
    var received: [UInt8] = []
    var error: CachetIOError?
    /// What /proc/self/fd says the socket is (`socket:[inode]`), unique while the socket lives.
    var socketIdentity: String?

    override func channelActive() {
        events.append("active")
        socketIdentity = descriptorTarget(fd)
    }

    override func channelRead() {
        received.append(contentsOf: input.readableRegion)
        input.moveReadIndex(forwardBy: input.readableBytes)
    }

    override func channelInactive(error: CachetIOError?) {
        events.append("inactive")
        self.error = error
    }
}

/// Pauses reading after its first read; counts the events the loop hands it.
final class PausingChannel: RecordingChannel, @unchecked Sendable {
    var eventCount = 0

    override func handleEvents(_ events: Events, on loop: CachetEventLoop) {
        eventCount += 1
        super.handleEvents(events, on: loop)
    }

    override func channelRead() {
        super.channelRead()
        pauseReading()
    }
}

/// Sends a 100-byte message, waits for its echo, sends the next: `rounds` round trips, one at a time.
final class PingPongChannel: CachetChannel, @unchecked Sendable {
    let rounds: Int
    var completed = 0
    var failure: CachetIOError?
    private var message = [UInt8](repeating: 0x5a, count: 100)

    init(rounds: Int) {
        self.rounds = rounds
        super.init()
    }

    override func channelActive() {
        write(message)
        flush()
    }

    override func channelRead() {
        while input.readableBytes >= message.count {
            input.moveReadIndex(forwardBy: message.count)
            completed += 1
            if completed < rounds {
                message.withUnsafeBytes { write($0) }
                flush()
            }
        }
    }

    override func channelInactive(error: CachetIOError?) { failure = error }
}

/// Closes itself as soon as bytes arrive, then goes on using itself before returning; logs that and its
/// deinit to `log`, which outlives it.
final class SelfClosingChannel: CachetChannel, @unchecked Sendable {
    let log: CachetLock<[String]>

    init(log: CachetLock<[String]>) {
        self.log = log
        super.init()
    }

    deinit { log.withLock { $0.append("deinit") } }

    override func channelRead() {
        close()
        log.withLock { $0.append("closed") }
        // Still this channel's own memory: the loop must not have let go of it yet.
        input.moveReadIndex(forwardBy: input.readableBytes)
        log.withLock { $0.append(isClosed ? "returning" : "not closed") }
    }
}

/// Accepts connections on a loop and registers each as an `EchoChannel`.
final class EchoServer: @unchecked Sendable {
    let port: Int
    let loop: CachetEventLoop
    private let listener: CachetListener

    init(loop: CachetEventLoop, greeting: [UInt8] = []) throws {
        let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        self.port = port
        self.loop = loop
        listener = CachetListener(
            accepted: { accepted in loop.register(EchoChannel(greeting: greeting), fd: accepted, isNonBlocking: true) },
            failed: { _ in }
        )
        let listener = listener
        loop.executeAndWait { loop.register(listener, fd: fd, isNonBlocking: true) }
    }

    func stop() {
        let listener = listener
        loop.executeAndWait { listener.close() }
    }
}

/// The target of /proc/self/fd/N (`socket:[inode]` for a socket).
func descriptorTarget(_ fd: Int32) -> String? {
    try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")
}

/// The targets of every open descriptor of this process.
func openDescriptorTargets() -> Set<String> {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return Set(names.compactMap { Int32($0).flatMap(descriptorTarget) })
}

/// Waits until `condition` (evaluated on the loop's queue) holds, at most `timeout`.
func waitUntil(
    _ loop: CachetEventLoop,
    timeout: Duration = .seconds(5),
    _ condition: @escaping () -> Bool
) -> Bool {
    let deadline = CachetDeadline(after: timeout)
    while !deadline.hasPassed {
        if loop.executeAndWait(condition) { return true }
        usleep(2_000)
    }
    return loop.executeAndWait(condition)
}

@Suite(.serialized, .dedicatedThreads) struct CachetEventLoopTests {
    @Test func outboundChannelEchoesThroughALocalListener() throws {
        let serverLoop = try CachetEventLoop(label: "test.server")
        let clientLoop = try CachetEventLoop(label: "test.client", lingerMilliseconds: 1)
        serverLoop.start()
        clientLoop.start()
        defer {
            clientLoop.stop()
            serverLoop.stop()
        }
        let server = try EchoServer(loop: serverLoop)
        defer { server.stop() }
        let channel = RecordingChannel()
        var message: [UInt8] = []
        for index in 0..<300_000 { message.append(UInt8(truncatingIfNeeded: index &* 31)) }
        let payload = message
        clientLoop.execute {
            // Written before the connection exists: sent once it does.
            channel.write(Array(payload.prefix(1000)))
            clientLoop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: server.port), timeout: .seconds(2))
        }
        #expect(waitUntil(clientLoop) { channel.received.count >= 1000 })
        clientLoop.execute {
            channel.write(Array(payload.dropFirst(1000)))
            channel.flush()
        }
        #expect(waitUntil(clientLoop) { channel.received.count >= payload.count })
        clientLoop.executeAndWait {
            #expect(channel.received == payload)
            #expect(channel.events == ["active"])
            #expect(channel.isActive)
            #expect(channel.remoteAddress == "127.0.0.1:\(server.port)")
        }
        clientLoop.executeAndWait { channel.close() }
        clientLoop.executeAndWait {
            #expect(channel.events == ["active", "inactive"])
            #expect(channel.error == nil)
            #expect(clientLoop.channelCount == 0)
        }
        // The server side sees the close and frees its channel; the listener stays.
        #expect(waitUntil(serverLoop) { serverLoop.channelCount == 1 })
    }

    @Test func pingPongRoundTripsInOrder() throws {
        // CACHET_IO_ROUNDS raises the count, to measure per-event costs under valgrind.
        let rounds = Int(ProcessInfo.processInfo.environment["CACHET_IO_ROUNDS"] ?? "") ?? 2000
        let loop = try CachetEventLoop(
            label: "test.pingpong",
            lingerMilliseconds: Int(ProcessInfo.processInfo.environment["CACHET_IO_LINGER"] ?? "") ?? 0
        )
        loop.start()
        defer { loop.stop() }
        let server = try EchoServer(loop: loop)
        defer { server.stop() }
        let channel = PingPongChannel(rounds: rounds)
        loop.execute {
            loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: server.port), timeout: .seconds(2))
        }
        #expect(waitUntil(loop, timeout: .seconds(60)) { channel.completed == rounds || channel.failure != nil })
        loop.executeAndWait {
            #expect(channel.completed == rounds)
            #expect(channel.failure == nil)
            #expect(channel.input.readableBytes == 0)
        }
    }

    @Test func aGreetingSentOnAcceptArrivesBeforeTheEchoOfWhatWasWrittenEarly() throws {
        let loop = try CachetEventLoop(label: "test.greeting")
        loop.start()
        defer { loop.stop() }
        let server = try EchoServer(loop: loop, greeting: Array("hello ".utf8))
        defer { server.stop() }
        for _ in 0..<20 {
            let channel = RecordingChannel()
            loop.execute {
                channel.write(Array("early".utf8))
                loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: server.port), timeout: .seconds(2))
            }
            #expect(waitUntil(loop) { channel.received.count >= 11 || channel.state == .closed })
            loop.executeAndWait {
                #expect(channel.received == Array("hello early".utf8))
                channel.close()
            }
        }
    }

    @Test func connectRefusedIsReported() throws {
        let loop = try CachetEventLoop(label: "test.refused")
        loop.start()
        defer { loop.stop() }
        let port = try closedPort()
        let channel = RecordingChannel()
        let started = ContinuousClock.now
        loop.execute { loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: port), timeout: .seconds(5)) }
        #expect(waitUntil(loop) { channel.events == ["inactive"] })
        #expect(ContinuousClock.now - started < .seconds(1))
        loop.executeAndWait {
            #expect(channel.error?.code == .connectionRefused)
            #expect(channel.state == .closed)
            #expect(loop.channelCount == 0)
            #expect(loop.timerCount == 0)
        }
    }

    @Test func connectTimesOutOnTheLoop() throws {
        let (listener, port, held) = try unansweringListener()
        defer {
            for fd in held { CachetSocket.close(fd) }
            CachetSocket.close(listener)
        }
        let loop = try CachetEventLoop(label: "test.timeout")
        loop.start()
        defer { loop.stop() }
        let channel = RecordingChannel()
        let started = ContinuousClock.now
        loop.execute {
            loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: port), timeout: .milliseconds(200))
        }
        #expect(waitUntil(loop) { channel.events == ["inactive"] })
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(190))
        #expect(elapsed < .seconds(2))
        loop.executeAndWait {
            #expect(channel.error?.code == .timedOut)
            #expect(loop.channelCount == 0)
        }
    }

    @Test func invalidAddressFailsLaterNotInline() throws {
        let loop = try CachetEventLoop(label: "test.invalid")
        loop.start()
        defer { loop.stop() }
        let channel = RecordingChannel()
        loop.executeAndWait {
            loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: 99999), timeout: .seconds(1))
            #expect(channel.events.isEmpty)
        }
        #expect(waitUntil(loop) { channel.events == ["inactive"] })
        loop.executeAndWait { #expect(channel.error?.code == .invalidAddress) }
    }

    @Test func peerCloseIsReported() throws {
        let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        defer { CachetSocket.close(listener) }
        let loop = try CachetEventLoop(label: "test.peerclose")
        loop.start()
        defer { loop.stop() }
        let channel = RecordingChannel()
        loop.execute { loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: port), timeout: .seconds(2)) }
        #expect(waitUntil(loop) { channel.events == ["active"] })
        let server = try #require(try acceptOne(listener))
        _ = [UInt8]("bye".utf8).withUnsafeBytes { CachetSocket.send(server, $0) }
        CachetSocket.close(server)
        #expect(waitUntil(loop) { channel.events == ["active", "inactive"] })
        loop.executeAndWait {
            #expect(channel.received == Array("bye".utf8))
            #expect(channel.error?.code == .connectionClosed)
        }
    }

    @Test func pausedReadingLeavesBytesInTheKernelUntilResumed() throws {
        let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        defer { CachetSocket.close(listener) }
        let loop = try CachetEventLoop(label: "test.pause")
        loop.start()
        defer { loop.stop() }
        let channel = PausingChannel()
        loop.execute { loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: port), timeout: .seconds(2)) }
        let server = try #require(try acceptOne(listener))
        defer { CachetSocket.close(server) }
        _ = [UInt8](repeating: 1, count: 100).withUnsafeBytes { CachetSocket.send(server, $0) }
        #expect(waitUntil(loop) { channel.isReadingPaused && !channel.received.isEmpty })
        let before = loop.executeAndWait { channel.received.count }
        _ = [UInt8](repeating: 2, count: 100).withUnsafeBytes { CachetSocket.send(server, $0) }
        usleep(100_000)
        #expect(loop.executeAndWait { channel.received.count } == before)
        // Resuming renews the registration, so the bytes already waiting are reported without a new edge.
        loop.execute {
            channel.resumeReading()
        }
        #expect(waitUntil(loop) { channel.received.count > before })
        // Each read pauses again: resume until everything has arrived.
        let deadlineAll = CachetDeadline(after: .seconds(5))
        while loop.executeAndWait({ channel.received.count }) < 200 && !deadlineAll.hasPassed {
            loop.execute { channel.resumeReading() }
            usleep(2_000)
        }
        loop.executeAndWait {
            #expect(channel.received == [UInt8](repeating: 1, count: 100) + [UInt8](repeating: 2, count: 100))
            #expect(channel.eventCount > 0)
        }
    }

    @Test func handleReadyEventsReadsWhatHasArrivedAndLeavesQueuedWorkToRun() throws {
        let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        defer { CachetSocket.close(listener) }
        let loop = try CachetEventLoop(label: "test.ready", lingerMilliseconds: 1)
        loop.start()
        defer { loop.stop() }
        let channel = RecordingChannel()
        loop.execute { loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: port), timeout: .seconds(2)) }
        let server = try #require(try acceptOne(listener))
        defer { CachetSocket.close(server) }
        #expect(waitUntil(loop) { channel.isActive })
        let ran = CachetLock(false)
        loop.executeAndWait {
            // The loop's queue is busy with this block: its handler cannot read what arrives meanwhile.
            loop.execute { ran.withLock { $0 = true } }
            _ = [UInt8]("due".utf8).withUnsafeBytes { CachetSocket.send(server, $0) }
            usleep(20_000)
            #expect(channel.received.isEmpty)
            loop.handleReadyEvents()
            #expect(channel.received == Array("due".utf8))
        }
        // The work queued before still runs (the wake-up was left for the handler).
        #expect(waitUntil(loop) { ran.withLock { $0 } })
    }

    /// The loop reaches a channel through its table without a retain per event: a channel that closes
    /// itself from its handler must stay alive until the handler has returned, and be freed afterwards
    /// (the table's retain is given back once the batch is over).
    @Test func aChannelClosedByItsOwnHandlerLivesUntilTheHandlerReturnsAndIsThenFreed() throws {
        let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        defer { CachetSocket.close(listener) }
        let loop = try CachetEventLoop(label: "test.selfclose")
        loop.start()
        defer { loop.stop() }
        let log = CachetLock<[String]>([])
        weak var weakChannel: SelfClosingChannel?
        do {
            // Only the loop holds the channel once this scope ends.
            let channel = SelfClosingChannel(log: log)
            weakChannel = channel
            loop.execute {
                loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: port), timeout: .seconds(2))
            }
        }
        let server = try #require(try acceptOne(listener))
        defer { CachetSocket.close(server) }
        #expect(waitUntil(loop) { weakChannel?.isActive == true })
        _ = [UInt8]("x".utf8).withUnsafeBytes { CachetSocket.send(server, $0) }
        #expect(waitUntil(loop) { log.withLock { $0.contains("deinit") } })
        #expect(log.withLock { $0 } == ["closed", "returning", "deinit"])
        loop.executeAndWait {
            #expect(weakChannel == nil)
            #expect(loop.channelCount == 0)
        }
    }

    @Test func timersRunInDeadlineOrderAndCancelledOnesDoNot() throws {
        let loop = try CachetEventLoop(label: "test.timers")
        loop.start()
        defer { loop.stop() }
        let fired = CachetLock<[Int]>([])
        let started = ContinuousClock.now
        loop.executeAndWait {
            loop.schedule(after: .milliseconds(60)) { fired.withLock { $0.append(3) } }
            loop.schedule(after: .milliseconds(20)) { fired.withLock { $0.append(1) } }
            let cancelled = loop.schedule(after: .milliseconds(30)) { fired.withLock { $0.append(99) } }
            loop.schedule(after: .milliseconds(40)) { fired.withLock { $0.append(2) } }
            loop.cancelTimer(cancelled)
        }
        #expect(waitUntil(loop) { fired.withLock { $0.count } == 3 })
        #expect(ContinuousClock.now - started >= .milliseconds(60))
        // Nothing else is due: the cancelled timer never runs.
        usleep(50_000)
        #expect(fired.withLock { $0 } == [1, 2, 3])
        loop.executeAndWait { #expect(loop.timerCount == 0) }
    }

    /// A loop lingering through timers (as the load generator's, pacing its requests) runs each timer at its
    /// time while it lingers, not when the linger (a second here) is over, and goes on serving its channels.
    @Test func aLoopLingeringThroughTimersRunsThemOnTimeAndServesOn() throws {
        let loop = try CachetEventLoop(label: "test.linger-timers", lingerMilliseconds: 1000)
        loop.start()
        defer { loop.stop() }
        loop.executeAndWait { loop.lingersThroughTimers = true }
        let server = try EchoServer(loop: loop)
        defer { server.stop() }
        let channel = RecordingChannel()
        loop.execute {
            loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: server.port), timeout: .seconds(2))
        }
        #expect(waitUntil(loop) { channel.isActive })
        // How late each timer ran, in nanoseconds; scheduled with a byte whose echo starts the linger.
        let lateness = CachetLock<[Int64]>([])
        loop.executeAndWait {
            for step in 1...10 {
                let deadline = CachetDeadline(after: .milliseconds(5 * step))
                loop.schedule(at: deadline) {
                    lateness.withLock { $0.append(Int64(CachetDeadline.now()) - Int64(deadline.uptimeNanoseconds)) }
                }
            }
            channel.write([1])
            channel.flush()
        }
        // Waited for without the loop's queue: work queued on it would end the linger.
        let deadline = CachetDeadline(after: .seconds(5))
        while lateness.withLock({ $0.count }) < 10 && !deadline.hasPassed { usleep(2_000) }
        let late = lateness.withLock { $0 }
        #expect(late.allSatisfy { $0 >= 0 }, "a timer ran early: \(late)")
        // Far less than the linger: a loaded machine may still delay the thread by a few milliseconds.
        #expect(late.allSatisfy { $0 < 200_000_000 }, "timers waited for the linger to end: \(late)")
        loop.executeAndWait {
            channel.write([2])
            channel.flush()
        }
        #expect(waitUntil(loop) { channel.received == [1, 2] })
    }

    @Test func stopClosesChannelsAndLeaksNoDescriptor() throws {
        // Other suites open descriptors in parallel, so the check follows this test's own sockets by
        // identity (socket inodes are unique while open) rather than counting descriptors.
        var sockets: [String] = []
        do {
            let serverLoop = try CachetEventLoop(label: "test.leak.server")
            let clientLoop = try CachetEventLoop(label: "test.leak.client")
            serverLoop.start()
            clientLoop.start()
            let server = try EchoServer(loop: serverLoop)
            let channels = (0..<20).map { _ in RecordingChannel() }
            for channel in channels {
                clientLoop.execute {
                    channel.write(Array("ping".utf8))
                    clientLoop.connect(
                        channel,
                        to: CachetAddress(host: "127.0.0.1", port: server.port),
                        timeout: .seconds(2)
                    )
                }
            }
            #expect(waitUntil(clientLoop) { channels.allSatisfy { $0.received.count == 4 } })
            // The 20 connections and the listener.
            #expect(waitUntil(serverLoop) { serverLoop.channelCount == 21 })
            sockets = clientLoop.executeAndWait { channels.compactMap(\.socketIdentity) }
            #expect(sockets.count == 20)
            #expect(openDescriptorTargets().isSuperset(of: sockets))
            clientLoop.executeAndWait { for channel in channels.prefix(10) { channel.close() } }
            clientLoop.stop()
            clientLoop.executeAndWait {
                #expect(channels.allSatisfy { $0.events == ["active", "inactive"] })
                #expect(channels.suffix(10).allSatisfy { $0.error?.code == .loopStopped })
                #expect(clientLoop.channelCount == 0)
            }
            #expect(waitUntil(serverLoop) { serverLoop.channelCount == 1 }, "the listener alone")
            server.stop()
            serverLoop.stop()
        }
        #expect(openDescriptorTargets().isDisjoint(with: sockets))
    }
}
