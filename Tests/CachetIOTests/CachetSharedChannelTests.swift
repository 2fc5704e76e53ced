import CachetIO
import CachetLocking
import CachetTestSupport
import Dispatch
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Records what arrives on a shared channel and what happens to it. Its properties are touched on the
/// loop's queue only; the test reads them through `executeAndWait`.
final class SharedRecordingChannel: CachetSharedChannel, @unchecked Sendable {
    var events: [String] = []
    var received: [UInt8] = []
    var error: CachetIOError?

    override func channelActive() { events.append("active") }

    override func channelRead() {
        received.append(contentsOf: input.readableRegion)
        input.moveReadIndex(forwardBy: input.readableBytes)
    }

    override func channelInactive(error: CachetIOError?) {
        events.append("inactive")
        self.error = error
    }
}

/// Accepts one connection on `listener` within `timeout`.
func acceptOne(_ listener: Int32, timeout: Duration = .seconds(2)) throws -> Int32? {
    let deadline = CachetDeadline(after: timeout)
    while !deadline.hasPassed {
        if let accepted = try CachetSocket.accept(listener) { return accepted }
        usleep(1000)
    }
    return nil
}

/// Reads from `fd` until `count` bytes have arrived, the stream ends, or `timeout` passes.
/// - Returns: the bytes, and whether the stream ended.
func readBytes(_ fd: Int32, count: Int, timeout: Duration) -> (bytes: [UInt8], ended: Bool) {
    let deadline = CachetDeadline(after: timeout)
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 1 << 20)
    while bytes.count < count {
        guard CachetSocket.wait(fd, for: Int16(POLLIN), until: deadline) else { return (bytes, false) }
        let result = chunk.withUnsafeMutableBytes { CachetSocket.read(fd, into: $0.baseAddress!, count: $0.count) }
        switch result {
        case .bytes(let got): bytes.append(contentsOf: chunk[0..<got])
        case .wouldBlock: continue
        case .endOfStream, .failed: return (bytes, true)
        }
    }
    return (bytes, false)
}

@Suite(.serialized, .dedicatedThreads) struct CachetSharedChannelTests {
    @Test func writesFromManyThreadsArriveWholeAndInOrderIncludingThoseBeforeTheConnect() throws {
        let serverLoop = try CachetEventLoop(label: "test.shared.server")
        let clientLoop = try CachetEventLoop(label: "test.shared.client", lingerMilliseconds: 1)
        serverLoop.start()
        clientLoop.start()
        defer {
            clientLoop.stop()
            serverLoop.stop()
        }
        let server = try EchoServer(loop: serverLoop)
        defer { server.stop() }
        let channel = SharedRecordingChannel(outputCapacity: 256)
        // Written from this thread before the loop has the channel: sent once connected, not by this thread.
        let early = Array("early;".utf8)
        #expect(!channel.writeShared { $0.append(early) })
        clientLoop.execute {
            clientLoop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: server.port), timeout: .seconds(2))
        }
        let threads = 8
        let perThread = 2000
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for sequence in 0..<perThread {
                let record = Array("\(thread):\(sequence);".utf8)
                record.withUnsafeBytes { channel.writeAndSendShared($0) }
            }
        }
        var expected = early.count
        for thread in 0..<threads {
            for sequence in 0..<perThread { expected += "\(thread):\(sequence);".utf8.count }
        }
        #expect(waitUntil(clientLoop, timeout: .seconds(20)) { channel.received.count >= expected })
        let received = clientLoop.executeAndWait { channel.received }
        #expect(received.count == expected)
        let records = String(decoding: received, as: UTF8.self).split(separator: ";")
        #expect(records.first == "early")
        // Every record whole (never interleaved with another's bytes), and each thread's in its order.
        var next = [Int](repeating: 0, count: threads)
        var malformed = 0
        for record in records.dropFirst() {
            let parts = record.split(separator: ":")
            guard parts.count == 2, let thread = Int(parts[0]), let sequence = Int(parts[1]), thread < threads,
                sequence == next[thread]
            else {
                malformed += 1
                continue
            }
            next[thread] += 1
        }
        #expect(malformed == 0)
        #expect(next == [Int](repeating: perThread, count: threads))
        clientLoop.executeAndWait { #expect(channel.events == ["active"]) }
    }

    @Test func aFullSocketIsHandedToTheLoopAndTheCallerDoesNotWait() throws {
        let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        defer { CachetSocket.close(listener) }
        let loop = try CachetEventLoop(label: "test.shared.full")
        loop.start()
        defer { loop.stop() }
        let channel = SharedRecordingChannel()
        loop.execute { loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: port), timeout: .seconds(2)) }
        let peer = try #require(try acceptOne(listener))
        defer { CachetSocket.close(peer) }
        #expect(waitUntil(loop) { channel.isActive })
        // Far more than the socket buffers of both ends hold while the peer reads nothing. The peer starts
        // reading after a second, on a thread of its own (so that a sender that waited for the socket would
        // still finish, and the test with it).
        let payload = PatternBytes.make(count: 16 << 20, step: 131, stampingEvery: 65_536)
        let tail = Array("tail".utf8)
        let total = payload.count + tail.count
        let readerStarted = CachetLock(false)
        let result = CachetLock<(bytes: [UInt8], ended: Bool)?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            usleep(1_000_000)
            readerStarted.withLock { $0 = true }
            let got = readBytes(peer, count: total, timeout: .seconds(20))
            result.withLock { $0 = got }
            done.signal()
        }
        payload.withUnsafeBytes { channel.writeAndSendShared($0) }
        // The caller sent what fitted and returned; the rest waits for the loop.
        #expect(!readerStarted.withLock { $0 })
        // Written while the loop holds the rest: appended, and sent after it.
        DispatchQueue.global().sync { tail.withUnsafeBytes { channel.writeAndSendShared($0) } }
        #expect(done.wait(timeout: .now() + 30) == .success)
        let (bytes, ended) = try #require(result.withLock { $0 })
        #expect(!ended)
        #expect(bytes.count == total)
        // Compared outside #expect, which would describe two 16 MiB arrays on a failure.
        let intact = PatternBytes.equal(bytes, payload + tail)
        #expect(intact)
        loop.executeAndWait {
            #expect(channel.events == ["active"])
            #expect(channel.pendingSharedBytes == 0)
        }
    }

    @Test func aCloseFromTheLoopLeavesTheDescriptorToTheThreadThatIsSending() throws {
        let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        defer { CachetSocket.close(listener) }
        let loop = try CachetEventLoop(label: "test.shared.retire")
        loop.start()
        defer { loop.stop() }
        let channel = SharedRecordingChannel()
        loop.execute { loop.connect(channel, to: CachetAddress(host: "127.0.0.1", port: port), timeout: .seconds(2)) }
        let peer = try #require(try acceptOne(listener))
        defer { CachetSocket.close(peer) }
        #expect(waitUntil(loop) { channel.isActive })
        // This thread becomes the sender, and is held there while the loop closes the channel.
        let hello = Array("hello".utf8)
        #expect(channel.writeShared { $0.append(hello) })
        loop.executeAndWait { channel.close() }
        loop.executeAndWait {
            #expect(channel.events == ["active", "inactive"])
            #expect(channel.isClosed)
        }
        // The descriptor is still open: the peer sees no end of the stream, so its number cannot have been
        // given to another socket under the sender.
        let (before, endedBefore) = readBytes(peer, count: 1, timeout: .milliseconds(200))
        #expect(before.isEmpty)
        #expect(!endedBefore)
        // The sender finishes on the socket it started with, then closes it.
        channel.sendShared()
        let (after, endedAfter) = readBytes(peer, count: hello.count + 1, timeout: .seconds(2))
        #expect(after == hello)
        #expect(endedAfter)
        // Bytes written after the close are dropped, and nobody becomes a sender.
        #expect(!channel.writeShared { $0.append(hello) })
        #expect(channel.pendingSharedBytes == 0)
    }
}
