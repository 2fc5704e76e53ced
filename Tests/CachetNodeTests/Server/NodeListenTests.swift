import CachetIO
import CachetTestSupport
import CachetWire
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Whether this machine can listen on the IPv6 loopback address.
private let hasIPv6Loopback: Bool = {
    guard let (fd, _) = try? CachetSocket.listen(on: CachetAddress(host: "::1", port: 0)) else { return false }
    close(fd)
    return true
}()

@Suite("Node: where it listens", .dedicatedThreads)
struct NodeListenTests {
    @Test(.enabled(if: hasIPv6Loopback, "this machine has no IPv6 loopback"))
    func aNodeOnTheIPv6LoopbackAnswers() throws {
        let node = try NodeProcess(arguments: ["--host", "::1"])
        let client = try TestSocket(host: "::1", port: node.port)
        let put = try client.roundTrip(.put(key: [UInt8]("v6".utf8), value: [7, 8, 9], ttl: 0))
        #expect(put.status == .ok)
        let get = try client.roundTrip(.get(key: [UInt8]("v6".utf8)))
        #expect(get.status == .ok && get.body == [7, 8, 9])
        // The IPv4 loopback is another address: nothing listens there on this port.
        #expect(throws: (any Error).self) { try TestSocket(host: "127.0.0.1", port: node.port, timeout: 1) }
    }

    @Test func aHostThatIsNeitherAnAddressNorANameStopsTheNode() throws {
        #expect(throws: (any Error).self) { try NodeProcess(arguments: ["--host", "not a host!"], timeout: 5) }
    }
}
