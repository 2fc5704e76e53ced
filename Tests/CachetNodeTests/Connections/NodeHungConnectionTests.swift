import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A connection whose output fills and then drains within one call used to be left registered for no
/// event at all: its remaining requests were never answered and, after the client closed, the node kept
/// the connection and its descriptor (issue 12, section 1).
@Suite("Node: no connection is left waiting for nothing", .dedicatedThreads)
struct NodeHungConnectionTests {
    @Test(arguments: 0..<6)
    func smallThenLargeGetsInOneWriteAreAllAnsweredAndTheConnectionIsReleased(trial: Int) throws {
        try withNode { server, port in
            let small = [UInt8](repeating: 0x61, count: 5_000)
            let large = PatternBytes.make(count: 1 << 20, seed: trial)
            let writer = try TestSocket(port: port)
            #expect(try writer.roundTrip(.put(key: Array("small".utf8), value: small, ttl: 0)).status == .ok)
            #expect(try writer.roundTrip(.put(key: Array("large".utf8), value: large, ttl: 0)).status == .ok)
            writer.close()

            let client = try TestSocket(port: port, timeout: 5)
            var batch = CachetCommand.get(key: Array("small".utf8)).encoded(id: 1)
            for id in 2...6 { batch += CachetCommand.get(key: Array("large".utf8)).encoded(id: UInt32(id)) }
            try client.send(batch)
            let first = try client.readResponse()
            #expect(first.id == 1 && first.body == small)
            for id in 2...6 {
                let reply = try client.readResponse()
                #expect(reply.id == UInt32(id) && reply.status == .ok && reply.body == large)
            }
            #expect(try client.roundTrip(.ping, id: 7) == CachetResponse(opcode: .ping, status: .ok, id: 7))
            client.close()
            #expect(waitForConnections(server, toReach: 0), "the node still holds the closed connection")
        }
    }
}

/// Polls STATS `connections_current` until it equals `count`, for at most `seconds`.
func waitForConnections(_ server: CachetNodeServer, toReach count: Int, seconds: Double = 5) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if statisticsField(server.statisticsJSON, "connections_current") == count { return true }
        usleep(10_000)
    }
    return false
}

/// An integer field of a STATS JSON body.
func statisticsField(_ json: String, _ name: String) -> Int? {
    guard let range = json.range(of: "\"\(name)\":") else { return nil }
    return Int(json[range.upperBound...].prefix { $0.isNumber || $0 == "-" })
}
