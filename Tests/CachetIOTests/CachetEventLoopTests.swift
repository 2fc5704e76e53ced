import CachetIO
import Dispatch
import Foundation
import Synchronization
import Testing

/// Echoes every byte back: an inbound channel.
final class EchoChannel: CachetChannel, @unchecked Sendable {
    override func channelRead() {
        write(input.readableRegion)
        input.moveReadIndex(forwardBy: input.readableBytes)
        flush()
    }
}

/// Records what happens to an outbound channel. Its properties are touched on the loop's queue only; the
/// test reads them through `executeAndWait`.
final class RecordingChannel: CachetChannel, @unchecked Sendable {
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

/// Accepts connections on a loop and registers each as an `EchoChannel`.
final class EchoServer: @unchecked Sendable {
    let port: Int
    let loop: CachetEventLoop
    private let source: any DispatchSourceRead

    init(loop: CachetEventLoop) throws {
        let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        self.port = port
        self.loop = loop
        source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: loop.queue)
        source.setEventHandler {
            while let accepted = try? CachetSocket.accept(fd) { loop.register(EchoChannel(), fd: accepted) }
        }
        source.setCancelHandler { CachetSocket.close(fd) }
        source.activate()
    }

    func stop() { source.cancel() }
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

@Suite(.serialized) struct CachetEventLoopTests {
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
        // The server side sees the close and frees its channel.
        #expect(waitUntil(serverLoop) { serverLoop.channelCount == 0 })
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
        let deadline = CachetDeadline(after: .seconds(2))
        var accepted: Int32?
        while accepted == nil && !deadline.hasPassed {
            accepted = try CachetSocket.accept(listener)
            if accepted == nil { usleep(1000) }
        }
        let server = try #require(accepted)
        _ = [UInt8]("bye".utf8).withUnsafeBytes { CachetSocket.send(server, $0) }
        CachetSocket.close(server)
        #expect(waitUntil(loop) { channel.events == ["active", "inactive"] })
        loop.executeAndWait {
            #expect(channel.received == Array("bye".utf8))
            #expect(channel.error?.code == .connectionClosed)
        }
    }

    @Test func timersRunInDeadlineOrderAndCancelledOnesDoNot() throws {
        let loop = try CachetEventLoop(label: "test.timers")
        loop.start()
        defer { loop.stop() }
        let fired = Mutex<[Int]>([])
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
            #expect(waitUntil(serverLoop) { serverLoop.channelCount == 20 })
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
            #expect(waitUntil(serverLoop) { serverLoop.channelCount == 0 })
            server.stop()
            serverLoop.stop()
        }
        #expect(openDescriptorTargets().isDisjoint(with: sockets))
    }
}
