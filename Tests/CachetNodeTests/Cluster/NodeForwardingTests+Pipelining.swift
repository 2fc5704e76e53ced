import CachetIO
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Pipelining across a forward (`Protocol/CLUSTER.md`, "Pipelining across a forward"): a connection goes
/// on answering and forwarding the requests behind a forward in flight, and every reply leaves in request
/// order.
extension NodeForwardingTests {
    @Test func twoHundredMixedRequestsPipelinedThroughOneNodeAreAnsweredInOrder() throws {
        let cluster = try Cluster()
        let socket = try cluster.node("n1").connect()
        // Each key: PUT, GET (the value), DEL, GET (a miss), one group after another in one write, so that
        // requests for n1's own keys sit between forwards to n2 and n3 in flight.
        let keys = (0..<50).map { "mixed-\($0)" }
        var batch: [UInt8] = []
        for (index, key) in keys.enumerated() {
            let bytes = Array(key.utf8)
            let base = UInt32(index * 4)
            CachetCommand.put(key: bytes, value: Array("value-\(index)".utf8), ttl: 0).encode(id: base, to: &batch)
            CachetCommand.get(key: bytes).encode(id: base + 1, to: &batch)
            CachetCommand.delete(key: bytes).encode(id: base + 2, to: &batch)
            CachetCommand.get(key: bytes).encode(id: base + 3, to: &batch)
        }
        try socket.send(batch)
        for (index, key) in keys.enumerated() {
            let base = UInt32(index * 4)
            let context = "\(key), owner \(cluster.owner(of: key))"
            let put = try socket.readResponse()
            #expect(put.id == base && put.opcode == .put && put.status == .ok, "\(context): \(put)")
            let get = try socket.readResponse()
            #expect(get.id == base + 1 && get.opcode == .get && get.body == Array("value-\(index)".utf8), "\(context)")
            let delete = try socket.readResponse()
            #expect(delete.id == base + 2 && delete.opcode == .delete && delete.status == .ok, "\(context)")
            let miss = try socket.readResponse()
            #expect(miss.id == base + 3 && miss.opcode == .get && miss.status == .notFound, "\(context): \(miss)")
        }
        #expect(Set(keys.map(cluster.owner(of:))).count == 3, "the keys span every member")
        let stats = try cluster.stats("n1")
        #expect((stats["forwards"] as? Int ?? 0) >= 100, "\(stats)")
        #expect(stats["forward_failures"] as? Int == 0, "\(stats)")
    }

    @Test func forwardsBehindOneToAFrozenOwnerAreSentBeforeItTimesOutAndAnsweredInOrder() throws {
        let timeout = 4.0
        let cluster = try Cluster(extraArguments: ["--forward-timeout", "\(timeout)"])
        for id in ["n2", "n3"] {
            #expect(try cluster.waitForState(of: id, on: "n1", toBe: "up", within: 5) == "up")
        }
        let n1 = try cluster.node("n1").connect()
        let frozenKey = cluster.key(ownedBy: "n2")
        let liveKeys = (0..<20).map { cluster.key(ownedBy: "n3", prefix: "live-\($0)-") }
        // Values of 8 KiB, so that the replies held behind the frozen forward show in the memory budget.
        let values = (0..<20).map { index in Array("v\(index)-".utf8) + [UInt8](repeating: UInt8(index), count: 8192) }
        for (key, value) in zip(liveKeys, values) {
            #expect(try n1.roundTrip(.put(key: Array(key.utf8), value: value, ttl: 0)).status == .ok)
        }
        let forwardsBefore = try cluster.stats("n1")["forwards"] as? Int ?? 0
        let getsBefore = try cluster.stats("n3")["gets"] as? Int ?? 0

        #expect(freeze(cluster.node("n2").process.processIdentifier), "n2 stopped")
        defer { kill(cluster.node("n2").process.processIdentifier, SIGCONT) }
        var batch: [UInt8] = []
        CachetCommand.get(key: Array(frozenKey.utf8)).encode(id: 0, to: &batch)
        for (index, key) in liveKeys.enumerated() {
            CachetCommand.get(key: Array(key.utf8)).encode(id: UInt32(1 + index), to: &batch)
        }
        let started = Date()
        try n1.send(batch)
        // A second connection sends the same, and is reset once its forwards are in flight: their late
        // replies must find nothing to write to (and the node must not fall over).
        let leaving = try cluster.node("n1").connect()
        try leaving.send(batch)

        // The GETs behind the frozen one are forwarded (and served by n3) long before its deadline, on
        // both connections, and their replies are held, charged to the connections' memory budget.
        var forwards = 0
        var gets = 0
        var held = 0
        while Date().timeIntervalSince(started) < timeout / 2 {
            forwards = (try cluster.stats("n1")["forwards"] as? Int ?? 0) - forwardsBefore
            gets = (try cluster.stats("n3")["gets"] as? Int ?? 0) - getsBefore
            held = try cluster.stats("n1")["connection_memory_bytes"] as? Int ?? 0
            if forwards >= 42 && gets >= 20 && held >= 20 * 8192 { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let overlapped = Date().timeIntervalSince(started)
        #expect(forwards >= 42 && gets >= 20, "after \(overlapped) s: \(forwards) forwards, \(gets) GETs on n3")
        #expect(held >= 20 * 8192, "connection_memory_bytes \(held) with 20 replies of 8 KiB held")
        #expect(overlapped < timeout / 2)
        var reset = linger(l_onoff: 1, l_linger: 0)
        setsockopt(leaving.fd, SOL_SOCKET, SO_LINGER, &reset, socklen_t(MemoryLayout<linger>.size))
        leaving.close()

        // The replies still come in request order: the frozen owner's UNAVAILABLE (at its deadline) first.
        let first = try n1.readResponse()
        let waited = Date().timeIntervalSince(started)
        #expect(first.id == 0 && first.status == .unavailable, "\(first)")
        #expect(waited >= timeout * 0.9, "answered after \(waited) s")
        for (index, value) in values.enumerated() {
            let reply = try n1.readResponse()
            #expect(reply.id == UInt32(1 + index) && reply.status == .ok && reply.body == value)
        }
        // Still serving, on the same connection and on a new one.
        #expect(try Self.get(liveKeys[0], from: n1, id: 99).body == values[0])
        #expect(try Self.get(liveKeys[1], from: try cluster.node("n1").connect()).body == values[1])
        #expect(cluster.node("n1").process.isRunning)
    }

    @Test func aConnectionStopsReadingAtItsBoundOfForwardsInFlight() throws {
        let timeout = 2.0
        let cluster = try Cluster(extraArguments: ["--forward-timeout", "\(timeout)"])
        for id in ["n2", "n3"] {
            #expect(try cluster.waitForState(of: id, on: "n1", toBe: "up", within: 5) == "up")
        }
        let n1 = try cluster.node("n1").connect()
        let keys = (0..<200).map { cluster.key(ownedBy: "n2", prefix: "bound-\($0)-") }
        let forwardsBefore = try cluster.stats("n1")["forwards"] as? Int ?? 0
        #expect(freeze(cluster.node("n2").process.processIdentifier), "n2 stopped")
        defer { kill(cluster.node("n2").process.processIdentifier, SIGCONT) }
        var batch: [UInt8] = []
        for (index, key) in keys.enumerated() {
            CachetCommand.get(key: Array(key.utf8)).encode(id: UInt32(index), to: &batch)
        }
        let started = Date()
        try n1.send(batch)
        // 128 forwards go out at once; the rest wait until those answer (at their deadline).
        var forwards = 0
        while Date().timeIntervalSince(started) < timeout / 2 {
            forwards = (try cluster.stats("n1")["forwards"] as? Int ?? 0) - forwardsBefore
            if forwards >= 128 { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        Thread.sleep(forTimeInterval: 0.2)
        forwards = (try cluster.stats("n1")["forwards"] as? Int ?? 0) - forwardsBefore
        #expect(forwards == 128, "\(forwards) forwards after \(Date().timeIntervalSince(started)) s")
        #expect(Date().timeIntervalSince(started) < timeout * 0.9, "checked before the first deadline")
        // Every request is answered in order once the frozen owner's forwards fail (later ones may go to
        // a stand-in, n1 itself or n3, once n2 is marked down, and miss there).
        for index in 0..<keys.count {
            let reply = try n1.readResponse()
            #expect(reply.id == UInt32(index) && (reply.status == .unavailable || reply.status == .notFound))
        }
    }
}
