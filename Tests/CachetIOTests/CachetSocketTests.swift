import CachetIO
import CachetTestSupport
import Foundation
import Testing

/// A port nothing listens on: bound, then closed.
func closedPort() throws -> Int {
    let (fd, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
    CachetSocket.close(fd)
    return port
}

/// A listener whose accept queue is full, so that further connects get no answer: listen with backlog 0
/// and connect until a connect does not complete. Returns the listener and the connections to close.
func unansweringListener() throws -> (listener: Int32, port: Int, held: [Int32]) {
    let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0), backlog: 0)
    var held: [Int32] = []
    for _ in 0..<16 {
        do {
            held.append(
                try CachetSocket.connect(to: CachetAddress(host: "127.0.0.1", port: port), timeout: .milliseconds(200))
            )
        } catch {
            return (listener, port, held)
        }
    }
    for fd in held { CachetSocket.close(fd) }
    CachetSocket.close(listener)
    throw CachetIOError(code: .connectionFailed, message: "the backlog never filled")
}

@Suite(.dedicatedThreads) struct CachetSocketTests {
    @Test func listenReportsTheBoundPortAndAcceptsConnections() throws {
        let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        defer { CachetSocket.close(listener) }
        #expect(port > 0)
        let client = try CachetBlockingConnection(
            to: CachetAddress(host: "127.0.0.1", port: port),
            timeout: .seconds(2)
        )
        let deadline = CachetDeadline(after: .seconds(2))
        var accepted: Int32?
        while accepted == nil && !deadline.hasPassed {
            accepted = try CachetSocket.accept(listener)
            if accepted == nil { _ = CachetSocket.wait(listener, for: Int16(POLLIN), until: deadline) }
        }
        let server = try #require(accepted)
        defer { CachetSocket.close(server) }
        try client.send(Array("hello".utf8), until: CachetDeadline(after: .seconds(2)))
        var buffer = [UInt8](repeating: 0, count: 16)
        #expect(CachetSocket.wait(server, for: Int16(POLLIN), until: CachetDeadline(after: .seconds(2))))
        let result = buffer.withUnsafeMutableBytes { CachetSocket.read(server, into: $0.baseAddress!, count: 16) }
        #expect(result == .bytes(5))
        #expect(Array(buffer.prefix(5)) == Array("hello".utf8))
    }

    @Test func listeningTwiceOnOnePortFailsClearly() throws {
        let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        defer { CachetSocket.close(listener) }
        #expect {
            _ = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: port))
        } throws: { error in
            (error as? CachetIOError)?.code == .listenFailed
        }
    }

    @Test func connectToAClosedPortIsRefusedFast() throws {
        let port = try closedPort()
        let started = ContinuousClock.now
        #expect {
            _ = try CachetBlockingConnection(to: CachetAddress(host: "127.0.0.1", port: port), timeout: .seconds(5))
        } throws: { error in
            let error = error as? CachetIOError
            return error?.code == .connectionRefused && error?.message.contains("127.0.0.1:\(port)") == true
        }
        #expect(ContinuousClock.now - started < .seconds(1))
    }

    @Test func connectToAnUnansweringAddressTimesOut() throws {
        let (listener, port, held) = try unansweringListener()
        defer {
            for fd in held { CachetSocket.close(fd) }
            CachetSocket.close(listener)
        }
        let started = ContinuousClock.now
        #expect {
            _ = try CachetSocket.connect(to: CachetAddress(host: "127.0.0.1", port: port), timeout: .milliseconds(300))
        } throws: { error in
            (error as? CachetIOError)?.code == .timedOut
        }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(290))
        #expect(elapsed < .seconds(2))
    }

    @Test func blockingReceiveStopsAtItsDeadline() throws {
        let (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        defer { CachetSocket.close(listener) }
        let client = try CachetBlockingConnection(
            to: CachetAddress(host: "127.0.0.1", port: port),
            timeout: .seconds(2)
        )
        let started = ContinuousClock.now
        #expect {
            try client.receive(until: CachetDeadline(after: .milliseconds(100)))
        } throws: { error in
            (error as? CachetIOError)?.code == .timedOut
        }
        #expect(ContinuousClock.now - started < .seconds(2))
    }

    @Test func byteBufferGrowsCompactsAndShrinks() {
        var buffer = CachetByteBuffer(capacity: 64)
        buffer.append([UInt8](repeating: 1, count: 50))
        buffer.moveReadIndex(forwardBy: 40)
        buffer.reserveWritable(40)
        #expect(buffer.readIndex == 0)
        #expect(buffer.readableBytes == 10)
        #expect(buffer.capacity == 64)
        buffer.append([UInt8](repeating: 2, count: 1000))
        #expect(buffer.capacity >= 1010)
        #expect(buffer.readableBytes == 1010)
        #expect(buffer.readableRegion[9] == 1 && buffer.readableRegion[10] == 2)
        buffer.moveReadIndex(forwardBy: 1010)
        #expect(buffer.readableBytes == 0 && buffer.writeIndex == 0)
        buffer.shrinkIfEmpty(above: 512, to: 128)
        #expect(buffer.capacity == 128)
        let written = buffer.write(reserving: 8) { room in
            room.storeBytes(of: UInt64(7).bigEndian, as: UInt64.self)
            return 8
        }
        #expect(written == 8 && buffer.readableBytes == 8)
    }

    @Test func byteBufferGrowsByAtMostOneStepOnceLargeAndResizesToWhatItHolds() {
        let step = CachetByteBuffer.largestGrowthStep
        var buffer = CachetByteBuffer(capacity: 4 * step)
        buffer.moveWriteIndex(forwardBy: 4 * step)
        buffer.reserveWritable(1)
        // Doubling would give 8 steps; the buffer grows by one step only.
        #expect(buffer.capacity == 5 * step)
        buffer.reserveWritable(3 * step)
        // Asked for more than a step: it gets exactly what it asked for.
        #expect(buffer.capacity == 7 * step)
        buffer.moveReadIndex(forwardBy: 4 * step - 100)
        buffer.resize(to: 0)
        // Compacted, then shrunk to the 100 unread bytes (and never below 64).
        #expect(buffer.readIndex == 0 && buffer.readableBytes == 100 && buffer.capacity == 100)
        buffer.append([UInt8](repeating: 3, count: 10))
        #expect(buffer.capacity == 200 && buffer.readableBytes == 110)
        buffer.moveReadIndex(forwardBy: 50)
        buffer.compact()
        #expect(buffer.readIndex == 0 && buffer.writeIndex == 60 && buffer.readableRegion.last == 3)
    }
}
