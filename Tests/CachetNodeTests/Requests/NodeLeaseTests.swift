import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// Read-through leases on a real node (`Protocol/PROTOCOL.md`, "Leases"): the first miss gets a token,
/// the others are told to wait; a PUT with the token stores while its lease stands, and is refused
/// NOT_STORED after a DEL, a PUT or a CLEAR of the key, or once the lease expired (the stale set of
/// "Scaling Memcache at Facebook").
@Suite("Node: read-through leases", .serialized, .dedicatedThreads)
struct NodeLeaseTests {
    static func leaseGet(_ key: String, on socket: TestSocket) throws -> CachetResponse {
        try socket.send(CachetCommand.get(key: Array(key.utf8)).encoded(id: 3, flags: .lease))
        return try socket.readResponse()
    }

    static func leasedPut(_ key: String, _ value: String, token: UInt64, on socket: TestSocket) throws -> CachetStatus {
        try socket.roundTrip(.leasedPut(key: Array(key.utf8), value: Array(value.utf8), ttl: 0, token: token)).status
    }

    @Test(arguments: [false, true])
    func theFirstMissGetsTheLeaseAndTheOthersWait(diskTier: Bool) throws {
        let directory = TemporaryDirectory(prefix: "cachet-lease")
        defer { directory.remove() }
        let node = try NodeProcess(arguments: diskTier ? ["--data-dir", directory.path] : ["--disk-limit", "0"])
        let first = try node.connect()
        let second = try node.connect()
        let miss = try Self.leaseGet("hot", on: first)
        #expect(miss.status == .notFound)
        let lease = try #require(CachetLeaseReply(decoding: miss.body))
        #expect(lease.token != 0)
        let waiting = try #require(CachetLeaseReply(decoding: try Self.leaseGet("hot", on: second).body))
        #expect(waiting.token == 0 && waiting.waitMilliseconds > 0)
        #expect(try Self.leasedPut("hot", "loaded", token: lease.token, on: first) == .ok)
        #expect(try Self.leaseGet("hot", on: second).body == Array("loaded".utf8))
        // The lease ended with its PUT: the token stores nothing more.
        #expect(try Self.leasedPut("hot", "again", token: lease.token, on: first) == .notStored)
        // A plain GET of a missing key is answered as always, with an empty body.
        let plain = try second.roundTrip(.get(key: Array("cold".utf8)))
        #expect(plain.status == .notFound && plain.body.isEmpty)
        #expect((try node.stats()["leases_outstanding"] as? Int) == 0)
    }

    @Test func aWriteBetweenTheLeaseAndItsPutMakesThePutNotStored() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let loader = try node.connect()
        let writer = try node.connect()
        // DEL between: the loaded value may predate it.
        var lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet("k", on: loader).body))
        #expect(try writer.roundTrip(.delete(key: Array("k".utf8))).status == .notFound)
        let refused = try loader.roundTrip(
            .leasedPut(key: Array("k".utf8), value: Array("old".utf8), ttl: 0, token: lease.token)
        )
        #expect(refused.status == .notStored)
        #expect(String(decoding: refused.body, as: UTF8.self).contains("lease"))
        #expect(try loader.roundTrip(.get(key: Array("k".utf8))).status == .notFound)
        // A PUT between: the newer value stays.
        lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet("k", on: loader).body))
        #expect(lease.token != 0)
        #expect(try writer.roundTrip(.put(key: Array("k".utf8), value: Array("new".utf8), ttl: 0)).status == .ok)
        #expect(try Self.leasedPut("k", "old", token: lease.token, on: loader) == .notStored)
        #expect(try loader.roundTrip(.get(key: Array("k".utf8))).body == Array("new".utf8))
        // A CLEAR between.
        lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet("c", on: loader).body))
        #expect(try writer.roundTrip(.clear).status == .ok)
        #expect(try Self.leasedPut("c", "old", token: lease.token, on: loader) == .notStored)
        // A wrong token.
        lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet("w", on: loader).body))
        #expect(try Self.leasedPut("w", "v", token: lease.token &+ 1, on: loader) == .notStored)
    }

    @Test func anExpiredLeaseIsLostAndTheNextMissGetsANewOne() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0", "--lease-time", "0.3"])
        let socket = try node.connect()
        let first = try #require(CachetLeaseReply(decoding: try Self.leaseGet("e", on: socket).body))
        #expect(try #require(CachetLeaseReply(decoding: try Self.leaseGet("e", on: socket).body)).token == 0)
        Thread.sleep(forTimeInterval: 0.5)
        // The holder died (or is slow): the next caller loads.
        let second = try #require(CachetLeaseReply(decoding: try Self.leaseGet("e", on: socket).body))
        #expect(second.token != 0 && second.token != first.token)
        #expect(try Self.leasedPut("e", "late", token: first.token, on: socket) == .notStored)
        #expect(try Self.leasedPut("e", "fresh", token: second.token, on: socket) == .ok)
    }

    /// The measurement of the Facebook paper, at the suite's scale: 4 client processes of 50 tasks read one
    /// hot key whose TTL is 1 s through read-through (each load takes 300 ms, so DELETEs land during
    /// loads), while this test updates the "database" and DELETEs the key during a load every second or so. The loader runs about once per expiry or delete, not once per process (or per
    /// task), and no read returns a version older than the last completed DELETE.
    /// (`CACHET_HERD_SECONDS=30` runs it for 30 s, as BENCHMARKS.md reports.)
    @Test func aHotKeyThatExpiresReachesTheLoaderAboutOncePerExpiry() throws {
        let seconds = Double(ProcessInfo.processInfo.environment["CACHET_HERD_SECONDS"] ?? "") ?? 8
        let directory = TemporaryDirectory(prefix: "cachet-herd")
        defer { directory.remove() }
        let database = directory.appending("database")
        try FileManager.default.createDirectory(atPath: database, withIntermediateDirectories: true)
        func write(_ name: String, _ value: Int) throws {
            try Data("\(value)\n".utf8).write(to: URL(fileURLWithPath: database + "/" + name), options: .atomic)
        }
        try write("version", 1)
        try write("deleted", 0)
        let node = try NodeProcess(arguments: ["--disk-limit", "0", "--lease-time", "2"])
        let readers = try (0..<4).map { _ in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-bench"))
            process.arguments = [
                "--port", "\(node.port)", "--herd", "herd:hot", "--herd-ttl", "1", "--herd-database", database,
                "--connections", "50", "--duration", "\(seconds)", "--herd-load-ms", "300",
            ]
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            return (process, output)
        }
        // The writer: a new version in the database, then a DELETE of the key, then the record that it is
        // done; each time while a load is in flight (a lease outstanding), so that the DELETE lands between
        // a load's read of the database and its PUT: the stale set that the lease must refuse.
        let writer = try node.connect()
        var version = 1
        var deletes = 0
        let end = Date().addingTimeInterval(seconds - 0.5)
        while Date() < end {
            Thread.sleep(forTimeInterval: 0.5)
            let loading = Date().addingTimeInterval(2)
            while Date() < loading, (try node.stats()["leases_outstanding"] as? Int ?? 0) == 0 {
                Thread.sleep(forTimeInterval: 0.005)
            }
            Thread.sleep(forTimeInterval: 0.1)
            version += 1
            try write("version", version)
            _ = try writer.roundTrip(.delete(key: Array("herd:hot".utf8)))
            try write("deleted", version)
            deletes += 1
        }
        var reads = 0
        var loads = 0
        var stale = 0
        var errors = 0
        for (process, output) in readers {
            process.waitUntilExit()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let report = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Int] ?? [:]
            reads += report["reads"] ?? 0
            loads += report["loads"] ?? 0
            stale += report["stale"] ?? 0
            errors += report["errors"] ?? 0
        }
        let expiries = Int(seconds.rounded(.up)) + 1
        print(
            "herd: \(reads) reads, \(loads) loads for \(expiries) expiries and \(deletes) deletes, \(stale) stale, \(errors) errors"
        )
        #expect(reads > 1000 && errors == 0 && stale == 0, "\(reads) reads, \(stale) stale, \(errors) errors")
        // A DELETE during a load costs two loads: the one whose PUT it refuses, and the next.
        #expect(loads <= expiries + 2 * deletes + 4, "\(loads) loads for \(expiries) expiries and \(deletes) deletes")
    }

    @Test func aLeaseIsKeptByTheKeysOwnerWhicheverMemberIsAsked() throws {
        let cluster = try NodeForwardingTests.Cluster()
        let key = (0...).lazy.map { "lease:\($0)" }.first { cluster.membership.owner(of: $0).id == "n2" }!
        let viaFirst = try TestSocket(port: cluster.ports["n1"]!, timeout: 5)
        let viaThird = try TestSocket(port: cluster.ports["n3"]!, timeout: 5)
        let lease = try #require(CachetLeaseReply(decoding: try Self.leaseGet(key, on: viaFirst).body))
        #expect(lease.token != 0)
        #expect(try #require(CachetLeaseReply(decoding: try Self.leaseGet(key, on: viaThird).body)).token == 0)
        #expect(try Self.leasedPut(key, "v", token: lease.token, on: viaThird) == .ok)
        #expect(try viaFirst.roundTrip(.get(key: Array(key.utf8))).body == Array("v".utf8))
    }
}
