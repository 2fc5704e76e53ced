import CachetNode
import CachetTestSupport
import CachetWire
import Dispatch
import Foundation
import Testing

@Suite("Node: pipelining and concurrency", .dedicatedThreads)
struct NodeLoadTests {
    @Test func tenThousandPipelinedRequestsInOneWrite() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            var batch: [UInt8] = []
            let count = 10_000
            for i in 0..<count {
                let key = [UInt8]("key-\((i / 2) % 500)")
                if i % 2 == 0 {
                    CachetCommand.put(key: key, value: [UInt8]("value-\(i)"), ttl: 0).encode(id: UInt32(i), to: &batch)
                } else {
                    CachetCommand.get(key: key).encode(id: UInt32(i), to: &batch)
                }
            }
            try client.send(batch)
            for i in 0..<count {
                let reply = try client.readResponse()
                #expect(reply.id == UInt32(i), "replies must come back in request order")
                if i % 2 == 0 {
                    #expect(reply.opcode == .put && reply.status == .ok)
                } else {
                    // The GET follows the PUT of the same key in the same batch.
                    #expect(reply.opcode == .get && reply.body == [UInt8]("value-\(i - 1)"))
                }
                if reply.id != UInt32(i) { break }
            }
        }
    }

    /// Connections are registered edge-triggered and read at most a few times per event: a burst many times
    /// larger than that must still be read to its end, with no further bytes arriving to report it.
    @Test func aBurstOfManyReadsIsReadToTheEnd() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port, timeout: 5)
            // 2 MiB of PUTs in one send, against at most 8 reads of about 16 KiB per event; the replies are
            // small, so nothing needs reading while the requests go out.
            let count = 256
            let value = [UInt8](repeating: 0x42, count: 8 << 10)
            var batch: [UInt8] = []
            for i in 0..<count {
                CachetCommand.put(key: [UInt8]("burst-\(i)"), value: value, ttl: 0).encode(id: UInt32(i), to: &batch)
            }
            try client.send(batch)
            for i in 0..<count {
                let reply = try client.readResponse()
                #expect(reply.id == UInt32(i) && reply.status == .ok)
                if reply.id != UInt32(i) { break }
            }
            #expect(try client.roundTrip(.get(key: [UInt8]("burst-\(count - 1)"))).body == value)
        }
    }

    /// 2,000 GETs of a 32 KiB value in one send: the node stops reading each time its pending replies pass
    /// the high-water mark, with requests still in the socket, and must find them again once the client
    /// has read enough (no new bytes arrive to report them).
    @Test func aReaderThatFallsBehindGetsEveryReplyInOrder() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port, timeout: 5)
            let value = (0..<(32 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            #expect(try client.roundTrip(.put(key: [UInt8]("wide"), value: value, ttl: 0)).status == .ok)
            let count = 2_000
            var batch: [UInt8] = []
            for i in 0..<count { CachetCommand.get(key: [UInt8]("wide")).encode(id: UInt32(i), to: &batch) }
            try client.send(batch)
            for i in 0..<count {
                let reply = try client.readResponse()
                #expect(reply.id == UInt32(i) && reply.body == value)
                if reply.id != UInt32(i) { break }
            }
        }
    }

    @Test func twoHundredConcurrentConnections() throws {
        try withNode({ $0.ioQueueCount = 2 }) { server, port in
            let clients = try (0..<200).map { _ in try TestSocket(port: port) }
            let failures = LockedCounter()
            DispatchQueue.concurrentPerform(iterations: clients.count) { index in
                let client = clients[index]
                do {
                    for round in 0..<20 {
                        let key = [UInt8]("client-\(index)-key-\(round % 5)")
                        let value = [UInt8]("value-\(index)-\(round)")
                        let put = try client.roundTrip(.put(key: key, value: value, ttl: 0), id: UInt32(round * 2))
                        let get = try client.roundTrip(.get(key: key), id: UInt32(round * 2 + 1))
                        if put.status != .ok || get.body != value || get.id != UInt32(round * 2 + 1) {
                            failures.increment()
                        }
                    }
                } catch {
                    failures.increment()
                }
            }
            #expect(failures.value == 0)
            let stats =
                try JSONSerialization.jsonObject(with: Data(clients[0].roundTrip(.stats).body)) as? [String: Any]
            #expect(stats?["connections_current"] as? Int == 200)
            #expect(stats?["puts"] as? Int == 4000)
            #expect(server.memory.statistics.items == 1000)
        }
    }

    @Test func maximumConnectionsIsEnforced() throws {
        try withNode({ $0.maximumConnections = 2 }) { _, port in
            let first = try TestSocket(port: port)
            let second = try TestSocket(port: port)
            #expect(try first.roundTrip(.ping).status == .ok)
            #expect(try second.roundTrip(.ping).status == .ok)
            let third = try TestSocket(port: port)
            let reply = try third.readResponse()
            #expect(reply.status == .unavailable)
            #expect(reply.bodyText.contains("--max-connections 2"))
            #expect(third.waitForClose())
            first.close()
            // The slot frees once the node has seen the close.
            var served = false
            for _ in 0..<50 where !served {
                Thread.sleep(forTimeInterval: 0.02)
                if let fourth = try? TestSocket(port: port), let reply = try? fourth.roundTrip(.ping),
                    reply.status == .ok
                {
                    served = true
                }
            }
            #expect(served)
        }
    }
}

/// A counter several threads may bump.
final class LockedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func increment() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
