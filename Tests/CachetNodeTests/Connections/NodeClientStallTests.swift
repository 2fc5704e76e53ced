import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Clients that hold the connection memory budget without progress (replies never read) while others wait
/// for it are closed after `--client-stall-timeout`, so a well-behaved client's large replies do not wait
/// for them forever; a client that reads, however slowly, is never closed for it.
@Suite("Node: stalled clients holding connection memory are closed", .dedicatedThreads)
struct NodeClientStallTests {
    static let largeValue = [UInt8](repeating: 0x4C, count: 1 << 20)
    static let neverReaders = 40

    /// A node with a small budget (8 MiB, of which replies may take 6) and a 1 MiB value, and
    /// `neverReaders` clients that pipeline 100 GETs of it each and never read: they hold every byte
    /// replies may take.
    static func startHeldNode(stallTimeout: Double) throws -> (NodeProcess, TestSocket, [RawClient]) {
        let node = try NodeProcess(arguments: [
            "--memory-limit", "\(16 << 20)", "--max-frame", "\(2 << 20)", "--connection-memory", "\(8 << 20)",
            "--client-stall-timeout", "\(stallTimeout)", "--disk-limit", "0", "--log-level", "warning",
        ])
        let client = try node.connect()
        client.setTimeout(10)
        #expect(try client.roundTrip(.put(key: Array("large".utf8), value: largeValue, ttl: 0)).status == .ok)
        var gets: [UInt8] = []
        for id in 0..<100 { gets += CachetCommand.get(key: Array("large".utf8)).encoded(id: UInt32(id)) }
        let hostile = try (0..<neverReaders).map { _ in
            try RawClient(port: node.port, sending: gets, receiveBuffer: 4096)
        }
        pump(hostile, seconds: 0.5)
        return (node, client, hostile)
    }

    /// Sends three GETs of the large value in one write and reads the replies as they come; returns how
    /// long all three took, or nil if they did not all arrive within `limit` seconds.
    static func largeGets(port: Int, limit: Double) throws -> Double? {
        let reader = try TestSocket(port: port)
        reader.setTimeout(limit)
        defer { reader.close() }
        var batch: [UInt8] = []
        for id in 1...3 { batch += CachetCommand.get(key: Array("large".utf8)).encoded(id: UInt32(id)) }
        let started = Date()
        try reader.send(batch)
        for id in 1...3 {
            guard let reply = try? reader.readResponse() else { return nil }
            #expect(reply.id == UInt32(id) && reply.status == .ok && reply.body.count == largeValue.count)
            if Date().timeIntervalSince(started) > limit { return nil }
        }
        return Date().timeIntervalSince(started)
    }

    @Test func neverReadersAreClosedAndALargeReaderIsServed() throws {
        let (node, client, hostile) = try Self.startHeldNode(stallTimeout: 1)
        defer {
            for socket in hostile { socket.close() }
            node.stop()
        }
        // The reader waits for reply memory; the never-readers have not moved for 1 s by then or soon after.
        let elapsed = try Self.largeGets(port: node.port, limit: 6)
        #expect(elapsed != nil, "three 1 MiB GETs did not complete within 6 s")
        // Every never-reader holds replies it does not read, so each is closed once it has held memory that
        // others wait for: the node keeps only the connection asking (the reader has gone). A never-reader
        // whose turn came only after the reader was served (its replies went to the kernel's buffers, and it
        // got memory once the others had been closed) holds memory nobody waits for, and is kept until a
        // reader waits again: a reader keeps coming while any is left.
        var json = ""
        let deadline = Date().addingTimeInterval(10)
        repeat {
            json = String(decoding: try client.roundTrip(.stats).body, as: UTF8.self)
            if statisticsField(json, "connections_current") == 1 { break }
            _ = try Self.largeGets(port: node.port, limit: 3)
        } while Date() < deadline
        #expect(statisticsField(json, "connections_evicted") == Self.neverReaders, "\(json)")
        #expect(statisticsField(json, "connections_current") == 1, "\(json)")
        #expect(node.log.contains("without progress"))
    }

    @Test func withoutTheTimeoutTheLargeReaderWaitsForTheHolders() throws {
        // The same scene with closing turned off: the reader cannot get its replies while the holders hold
        // the memory (what the test above relies on being fixed).
        let (node, client, hostile) = try Self.startHeldNode(stallTimeout: 0)
        defer {
            for socket in hostile { socket.close() }
            node.stop()
        }
        #expect(try Self.largeGets(port: node.port, limit: 3) == nil, "the large GETs were served anyway")
        let json = String(decoding: try client.roundTrip(.stats).body, as: UTF8.self)
        #expect(statisticsField(json, "connections_evicted") == 0, "\(json)")
    }

    @Test func aSlowReaderIsNeverClosed() throws {
        // A client that reads its large replies slowly (64 KiB at most every 5 ms, through a 64 KiB receive
        // buffer), for longer than the stall timeout, while never-readers hold the budget: it moves, so it
        // is served to the end.
        let (node, client, hostile) = try Self.startHeldNode(stallTimeout: 0.5)
        defer {
            for socket in hostile { socket.close() }
            node.stop()
        }
        let slow = try RawClient(port: node.port, sending: [], receiveBuffer: 65_536)
        defer { slow.close() }
        var batch: [UInt8] = []
        for id in 1...3 { batch += CachetCommand.get(key: Array("large".utf8)).encoded(id: UInt32(id)) }
        slow.queue(batch)
        slow.step()
        let expected = 3 * (4 + 8 + Self.largeValue.count)
        let deadline = Date().addingTimeInterval(20)
        var received = 0
        while received < expected && Date() < deadline {
            guard let n = slow.readSome(upTo: 65_536) else { break }
            received += n
            usleep(5_000)
        }
        #expect(received == expected, "the slow reader got \(received) of \(expected) bytes")
        let json = String(decoding: try client.roundTrip(.stats).body, as: UTF8.self)
        #expect((statisticsField(json, "connections_evicted") ?? 0) <= Self.neverReaders, "\(json)")
    }
}

extension RawClient {
    /// Reads what has arrived, at most `limit` bytes; 0 when nothing has; nil once the stream has ended.
    func readSome(upTo limit: Int) -> Int? {
        var chunk = [UInt8](repeating: 0, count: limit)
        let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
        if n > 0 { return n }
        if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return 0 }
        return nil
    }
}
