import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A memcached client's connection for the tests: text written, lines read.
struct MemcacheTextClient {
    let socket: TestSocket

    init(port: Int) throws {
        socket = try TestSocket(port: port)
    }

    func send(_ text: String) throws { try socket.send(Array(text.utf8)) }

    /// One line, without its `\r\n`.
    func line() throws -> String {
        var bytes: [UInt8] = []
        while !(bytes.count >= 2 && bytes[bytes.count - 2] == 13 && bytes[bytes.count - 1] == 10) {
            bytes += try socket.readBytes(1)
        }
        return String(decoding: bytes.dropLast(2), as: UTF8.self)
    }

    /// `count` lines.
    func lines(_ count: Int) throws -> [String] { try (0..<count).map { _ in try line() } }

    /// Sends `text` and reads `count` lines.
    func exchange(_ text: String, lines count: Int = 1) throws -> [String] {
        try send(text)
        return try lines(count)
    }

    /// The lines of a retrieval, up to and with `END`.
    func retrieve(_ text: String) throws -> [String] {
        try send(text)
        var lines: [String] = []
        while true {
            let line = try line()
            lines.append(line)
            if line == "END" || line.hasPrefix("SERVER_ERROR") || line.hasPrefix("CLIENT_ERROR") { return lines }
        }
    }

    /// The CAS unique of `key` (`gets`).
    func cas(_ key: String) throws -> UInt64? {
        let lines = try retrieve("gets \(key)\r\n")
        guard lines.count == 3 else { return nil }
        return lines[0].split(separator: " ").last.flatMap { UInt64($0) }
    }
}

/// memcached's text protocol on a node's memcached port (`--memcached-port`, `docs/memcached.md`), by real
/// node processes over real sockets: every command and its replies as memcached gives them, noreply and
/// pipelined mixes, every error line, CAS races between two clients, incr across 2^64, items read through
/// the other protocol, users, a cluster, and a restart.
@Suite("Node: memcached's text protocol", .dedicatedThreads)
struct NodeMemcacheTests {
    /// A node with a memcached port; returns it and the port.
    /// A cluster of three whose members each speak memcached's protocol too, on the ports returned (n1's
    /// first); the caller waits for it to serve.
    static func clusterWithMemcachedPorts() throws -> (NodeForwardingTests.Cluster, [Int]) {
        let ports = try (0..<3).map { _ in try NodeMetricsTests.freePort() }
        let cluster = try NodeForwardingTests.Cluster()
        // Each member again, with a memcached port.
        for (index, id) in ["n1", "n2", "n3"].enumerated() {
            _ = cluster.node(id).stop()
            try cluster.start(id, extraArguments: ["--memcached-port", "\(ports[index])"])
        }
        return (cluster, ports)
    }

    static func node(_ extra: [String] = ["--disk-limit", "0"]) throws -> (NodeProcess, Int) {
        let port = try NodeMetricsTests.freePort()
        return (try NodeProcess(arguments: ["--memcached-port", "\(port)"] + extra), port)
    }

    /// Large values of `get`s go from the entry to the socket behind their VALUE lines: pipelined with misses,
    /// other commands and gets of several keys, to a reader that takes a little at a time, every reply whole
    /// and in order.
    /// `get`s of what memory holds are answered by the session itself when nothing before them waits for a
    /// native reply; a key it cannot answer (on the disk tier only, a value of 64 KiB or more) and every key
    /// after it take the native path, and a get behind a write waits for the write: replies stay in order,
    /// each read sees the writes before it, and the counters count every key once.
    @Test func getsAnsweredFromMemoryKeepTheirOrderAndSeeEarlierWrites() throws {
        let directory = NSTemporaryDirectory() + "cachet-memcache-reads-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (node, port) = try Self.node(["--data-dir", directory, "--memory-limit", "4MiB"])
        let native = try node.connect()
        // Values of 100 KB: the first ones are pushed out of memory, kept on the disk tier.
        let large = (0..<60).map { PatternBytes.make(count: 100_000, seed: $0) }
        for (index, value) in large.enumerated() {
            #expect(try native.roundTrip(.put(key: Array("large-\(index)".utf8), value: value, ttl: 0)).status == .ok)
        }
        let client = try MemcacheTextClient(port: port)
        #expect(try client.exchange("set small 3 0 3\r\nold\r\n") == ["STORED"])
        var statsLines = try client.retrieve("stats\r\n")
        func stat(_ name: String, _ lines: [String]) -> Int? {
            lines.first { $0.hasPrefix("STAT \(name) ") }.flatMap { Int($0.split(separator: " ")[2]) }
        }
        let hits = try #require(stat("get_hits", statsLines))
        let misses = try #require(stat("get_misses", statsLines))
        // A write, then a get of its key, in one batch: the get sees the write.
        try client.send("set small 3 0 3\r\nnew\r\nget small\r\n")
        #expect(try client.lines(4) == ["STORED", "VALUE small 3 3", "new", "END"])
        // Memory, the disk tier, memory again, a miss, and a value the native path sends: in order.
        try client.send("get small large-0 small nothing large-59\r\ngets small\r\n")
        var expected = ["VALUE small 3 3", "new", "VALUE large-0 0 100000"]
        #expect(try client.lines(3) == expected)
        #expect(try client.socket.readBytes(100_002) == large[0] + Array("\r\n".utf8))
        expected = ["VALUE small 3 3", "new", "VALUE large-59 0 100000"]
        #expect(try client.lines(3) == expected)
        #expect(try client.socket.readBytes(100_002) == large[59] + Array("\r\n".utf8))
        #expect(try client.line() == "END")
        let withCAS = try client.lines(3)
        #expect(withCAS[0].hasPrefix("VALUE small 3 3 ") && withCAS[1...] == ["new", "END"], "\(withCAS)")
        statsLines = try client.retrieve("stats\r\n")
        #expect(stat("get_hits", statsLines) == hits + 6, "\(statsLines)")
        #expect(stat("get_misses", statsLines) == misses + 1)
    }

    /// On a node without a disk tier, storage commands are done by the session itself when nothing before
    /// them waits for a native reply; behind a command that does (a delete, an incr), they wait their turn.
    @Test func writesDoneInPlaceKeepTheirOrderWithTheOthers() throws {
        let (node, port) = try Self.node()
        let client = try MemcacheTextClient(port: port)
        try client.send(
            "set k 0 0 3\r\nold\r\ndelete k\r\nset k 0 0 3\r\nnew\r\nget k\r\n"
                + "set n 0 0 1\r\n1\r\nincr n 5\r\nappend n 0 0 1\r\n0\r\nadd n 0 0 1\r\nx\r\nget n\r\n"
        )
        #expect(
            try client.lines(12) == [
                "STORED", "DELETED", "STORED", "VALUE k 0 3", "new", "END",
                "STORED", "6", "STORED", "NOT_STORED", "VALUE n 0 2", "60",
            ]
        )
        #expect(try client.line() == "END")
        #expect(try node.connect().roundTrip(.get(key: Array("n".utf8))).body == Array("60".utf8))
    }

    /// An item stored by `set` without flags keeps no item fields: it costs what a native PUT's entry costs
    /// (a `gets` gives it a CAS unique when one is asked for); one with flags keeps them.
    @Test func itemsSetWithoutFlagsCostWhatNativeEntriesCost() throws {
        let (node, port) = try Self.node()
        let native = try node.connect()
        let client = try MemcacheTextClient(port: port)
        // 120 bytes: the 12 bytes of flags and CAS take an entry of this size into the next size class.
        let value = String(repeating: "v", count: 120)
        func memory() throws -> Int { try #require(try node.stats()["memory_bytes"] as? Int) }
        var before = try memory()
        for index in 0..<500 {
            #expect(
                try native.roundTrip(.put(key: Array("a\(index + 1000)".utf8), value: Array(value.utf8), ttl: 0)).status
                    == .ok
            )
        }
        let nativeCost = try memory() - before
        before = try memory()
        for index in 0..<500 {
            #expect(try client.exchange("set b\(index + 1000) 0 0 120\r\n\(value)\r\n") == ["STORED"])
        }
        #expect(try memory() - before == nativeCost, "500 items set without flags against 500 native entries")
        before = try memory()
        for index in 0..<500 {
            #expect(try client.exchange("set c\(index + 1000) 7 0 120\r\n\(value)\r\n") == ["STORED"])
        }
        #expect(try memory() - before > nativeCost, "flags are kept")
        // A gets of an item set without flags gives it a CAS unique, and cas works with it.
        let gets = try client.retrieve("gets b1000\r\n")
        let unique = try #require(gets.first?.split(separator: " ").last)
        #expect(try client.exchange("cas b1000 0 0 1 \(unique)\r\nx\r\n") == ["STORED"])
        #expect(try client.exchange("cas b1000 0 0 1 \(unique)\r\ny\r\n") == ["EXISTS"])
    }

    @Test func largeValuesOfGetsReachTheSocketWholeAndInOrder() throws {
        let (node, port) = try Self.node()
        let client = try MemcacheTextClient(port: port)
        let values = (0..<3).map { PatternBytes.make(count: 200_000 + $0 * 1_001, seed: $0 + 1) }
        for (index, value) in values.enumerated() {
            try client.socket.send(Array("set big\(index) \(index + 7) 0 \(value.count)\r\n".utf8) + value + [13, 10])
            #expect(try client.line() == "STORED")
        }
        let casOfLast = try #require(try client.cas("big2"))
        let slow = try TestSocket(port: port)
        slow.setReceiveBuffer(16 << 10)
        let commands = "get big0 nothing big1\r\nversion\r\ngets big2\r\nget small\r\nget big1 big0\r\nget big2\r\n"
        try slow.send(Array(commands.utf8))
        Thread.sleep(forTimeInterval: 0.3)
        func block(_ index: Int, cas: UInt64? = nil) -> [UInt8] {
            let value = values[index]
            let line = "VALUE big\(index) \(index + 7) \(value.count)" + (cas.map { " \($0)" } ?? "") + "\r\n"
            return Array(line.utf8) + value + [13, 10]
        }
        let end = Array("END\r\n".utf8)
        let first = block(0) + block(1) + end
        #expect((try slow.readBytes(first.count) == first) == true, "a get of two large values and a miss")
        let version = String(decoding: try slow.readThrough(Array("\r\n".utf8)), as: UTF8.self)
        #expect(version.hasPrefix("VERSION "), "\(version)")
        let rest = block(2, cas: casOfLast) + end + end + block(1) + block(0) + end + block(2) + end
        #expect((try slow.readBytes(rest.count) == rest) == true, "gets, a miss, then two gets of large values")
        _ = node
    }

    @Test func everyCommandIsAnsweredAsMemcachedAnswersIt() throws {
        let (node, port) = try Self.node()
        _ = node
        let client = try MemcacheTextClient(port: port)
        #expect(try client.exchange("set foo 42 0 3\r\nbar\r\n") == ["STORED"])
        #expect(try client.retrieve("get foo\r\n") == ["VALUE foo 42 3", "bar", "END"])
        let gets = try client.retrieve("gets foo missing foo\r\n")
        #expect(gets.count == 5 && gets[0].hasPrefix("VALUE foo 42 3 ") && gets[4] == "END")
        let unique = try #require(try client.cas("foo"))
        #expect(try client.exchange("add foo 0 0 1\r\nx\r\n") == ["NOT_STORED"])
        #expect(try client.exchange("add new 1 0 1\r\nx\r\n") == ["STORED"])
        #expect(try client.exchange("replace missing 0 0 1\r\nx\r\n") == ["NOT_STORED"])
        #expect(try client.exchange("replace new 2 0 1\r\ny\r\n") == ["STORED"])
        #expect(try client.exchange("append foo 0 0 2\r\n!!\r\n") == ["STORED"])
        #expect(try client.exchange("prepend foo 0 0 2\r\n<<\r\n") == ["STORED"])
        #expect(try client.exchange("append missing 0 0 1\r\nx\r\n") == ["NOT_STORED"])
        #expect(try client.retrieve("get foo new\r\n") == ["VALUE foo 42 7", "<<bar!!", "VALUE new 2 1", "y", "END"])
        #expect(try client.exchange("cas foo 0 0 1 \(unique)\r\nz\r\n") == ["EXISTS"], "appended since")
        let fresh = try #require(try client.cas("foo"))
        #expect(try client.exchange("cas foo 7 0 1 \(fresh)\r\nz\r\n") == ["STORED"])
        #expect(try client.exchange("cas missing 0 0 1 1\r\nz\r\n") == ["NOT_FOUND"])
        #expect(try client.retrieve("get foo\r\n") == ["VALUE foo 7 1", "z", "END"])
        // incr and decr: 64 bits, wrapping up at 2^64 and stopping at 0 down, as memcached does.
        #expect(try client.exchange("set n 0 0 20\r\n18446744073709551614\r\n") == ["STORED"])
        #expect(try client.exchange("incr n 1\r\n") == ["18446744073709551615"])
        #expect(try client.exchange("incr n 2\r\n") == ["1"])
        #expect(try client.exchange("decr n 5\r\n") == ["0"])
        #expect(try client.exchange("incr missing 1\r\n") == ["NOT_FOUND"])
        #expect(
            try client.exchange("incr foo 1\r\n") == ["CLIENT_ERROR cannot increment or decrement non-numeric value"]
        )
        // touch, gat and gats.
        #expect(try client.exchange("touch foo 100\r\n") == ["TOUCHED"])
        #expect(try client.exchange("touch missing 100\r\n") == ["NOT_FOUND"])
        #expect(try client.retrieve("gat 100 foo missing\r\n") == ["VALUE foo 7 1", "z", "END"])
        let gats = try client.retrieve("gats 0 foo\r\n")
        #expect(gats.count == 3 && gats[0].hasPrefix("VALUE foo 7 1 "))
        // delete, version, verbosity, stats, flush_all.
        #expect(try client.exchange("delete foo\r\n") == ["DELETED"])
        #expect(try client.exchange("delete foo\r\n") == ["NOT_FOUND"])
        #expect(try client.exchange("version\r\n") == ["VERSION 1.6.0"])
        #expect(try client.exchange("verbosity 1\r\n") == ["OK"])
        let stats = try client.retrieve("stats\r\n")
        for name in ["pid", "uptime", "version", "curr_items", "total_items", "bytes", "limit_maxbytes"] {
            #expect(stats.contains { $0.hasPrefix("STAT \(name) ") }, "\(name)")
        }
        for name in ["curr_connections", "cmd_get", "cmd_set", "get_hits", "get_misses", "evictions"] {
            #expect(stats.contains { $0.hasPrefix("STAT \(name) ") }, "\(name)")
        }
        #expect(try client.retrieve("stats settings\r\n") == ["END"])
        #expect(try client.exchange("flush_all\r\n") == ["OK"])
        #expect(try client.retrieve("get new n\r\n") == ["END"])
        // quit closes, answering nothing.
        try client.send("quit\r\n")
        #expect(client.socket.waitForClose())
    }

    @Test func pipelinedCommandsWithNoreplyAreAnsweredInOrder() throws {
        let (node, port) = try Self.node()
        _ = node
        let client = try MemcacheTextClient(port: port)
        // One write: every quiet command answers nothing, the others in order.
        try client.send(
            "set a 1 0 1 noreply\r\n1\r\nset b 2 0 1\r\n2\r\nincr a 5 noreply\r\nget a b c\r\n"
                + "add a 0 0 1 noreply\r\nx\r\ndelete b noreply\r\nget b\r\nflush_all noreply\r\n"
                + "touch a 1 noreply\r\nversion\r\nget a\r\n"
        )
        #expect(
            try client.lines(9) == [
                "STORED", "VALUE a 1 1", "6", "VALUE b 2 1", "2", "END", "END", "VERSION 1.6.0", "END",
            ]
        )
        // A thousand commands in one write, each answered, in order.
        var text = ""
        for index in 0..<1000 {
            text += "set k\(index) 0 0 \(String(index).utf8.count)\r\n\(index)\r\nget k\(index)\r\n"
        }
        try client.send(text)
        for index in 0..<1000 {
            #expect(
                try client.lines(4) == ["STORED", "VALUE k\(index) 0 \(String(index).utf8.count)", "\(index)", "END"]
            )
        }
    }

    @Test func badInputGetsMemcachedsErrorLinesAndTheConnectionGoesOn() throws {
        let (node, port) = try Self.node(["--disk-limit", "0", "--memcached-item-size", "4KiB"])
        _ = node
        let client = try MemcacheTextClient(port: port)
        #expect(try client.exchange("bogus\r\n") == ["ERROR"])
        #expect(try client.exchange("\r\n") == ["CLIENT_ERROR bad command line format"])
        #expect(try client.exchange("get\r\n") == ["CLIENT_ERROR bad command line format"])
        #expect(
            try client.exchange("get \(String(repeating: "k", count: 251))\r\n") == [
                "CLIENT_ERROR bad command line format"
            ]
        )
        // A bad field before a length that can be read: the data block is swallowed with the line.
        #expect(try client.exchange("set k x 0 1\r\nz\r\n") == ["CLIENT_ERROR bad command line format"])
        // As memcached: the block's announced bytes and two more are taken, and what follows is a new line.
        #expect(
            try client.exchange("set k 0 0 1\r\nxyz\r\n", lines: 2) == [
                "CLIENT_ERROR bad data chunk", "CLIENT_ERROR bad command line format",
            ]
        )
        #expect(
            try client.exchange("delete k 5\r\n") == [
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
            ]
        )
        #expect(try client.exchange("incr k -1\r\n") == ["CLIENT_ERROR invalid numeric delta argument"])
        #expect(try client.exchange("version foo\r\n") == ["VERSION 1.6.0"], "words after version are ignored")
        // A value over the item size is refused and its data thrown away as it arrives.
        let large = String(repeating: "v", count: 5000)
        try client.send("set big 0 0 5000\r\n" + String(large.prefix(100)))
        #expect(try client.line() == "SERVER_ERROR object too large for cache")
        try client.send(String(large.dropFirst(100)) + "\r\nget big\r\n")
        #expect(try client.line() == "END")
        // A set too large removes the value it would have replaced (memcached's rule: no stale value stays).
        #expect(try client.exchange("set kept 0 0 3\r\nold\r\n") == ["STORED"])
        #expect(try client.exchange("set kept 0 0 5000\r\n\(large)\r\n") == ["SERVER_ERROR object too large for cache"])
        #expect(try client.retrieve("get kept\r\n") == ["END"])
        // An HTTP request on the port: closed without a reply.
        let browser = try MemcacheTextClient(port: port)
        try browser.send("GET / HTTP/1.1\r\nHost: cache\r\n\r\n")
        #expect(browser.socket.waitForClose())
        #expect(try client.exchange("set ok 0 0 2\r\nok\r\n") == ["STORED"])
        // A line without its end past 2048 bytes closes the connection, as memcached does; others go on.
        let other = try MemcacheTextClient(port: port)
        try other.send("set " + String(repeating: "x", count: 3000))
        #expect(other.socket.waitForClose())
        #expect(try client.retrieve("get ok\r\n") == ["VALUE ok 0 2", "ok", "END"])
    }

    @Test func twoClientsRacingWithCASStoreOneValueAndTheOtherGetsExists() throws {
        let (node, port) = try Self.node()
        _ = node
        let first = try MemcacheTextClient(port: port)
        let second = try MemcacheTextClient(port: port)
        #expect(try first.exchange("set counter 0 0 1\r\n0\r\n") == ["STORED"])
        for round in 0..<50 {
            let a = try #require(try first.cas("counter"))
            let b = try #require(try second.cas("counter"))
            #expect(a == b)
            // Both send at once; exactly one is stored.
            try first.send("cas counter 0 0 1 \(a)\r\n\(round % 10)\r\n")
            try second.send("cas counter 0 0 1 \(b)\r\n\(round % 10)\r\n")
            let answers = [try first.line(), try second.line()].sorted()
            #expect(answers == ["EXISTS", "STORED"], "round \(round): \(answers)")
        }
    }

    @Test func itemsAreSharedWithTheNativeProtocol() throws {
        let (node, port) = try Self.node()
        let client = try MemcacheTextClient(port: port)
        let native = try node.connect()
        #expect(try client.exchange("set shared 9 100 5\r\nhello\r\n") == ["STORED"])
        // The native GET reads the value, its TTL too; the flags and CAS stay for the memcached client.
        #expect(try native.roundTrip(.get(key: Array("shared".utf8))).body == Array("hello".utf8))
        try native.send(CachetCommand.get(key: Array("shared".utf8)).encoded(id: 2, flags: .ttl))
        let timed = try native.readResponse()
        let ttl = timed.body.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        #expect(timed.status == .ok && ttl > 90 && ttl <= 100)
        try native.send(CachetCommand.get(key: Array("shared".utf8)).encoded(id: 3, flags: .item))
        let item = try native.readResponse()
        #expect(item.status == .ok && Array(item.body.prefix(4)) == [0, 0, 0, 9])
        // A native write is a new version: flags 0, read by memcached.
        #expect(try native.roundTrip(.put(key: Array("shared".utf8), value: Array("world".utf8), ttl: 0)).status == .ok)
        #expect(try client.retrieve("get shared\r\n") == ["VALUE shared 0 5", "world", "END"])
        // A native DEL is seen at once.
        #expect(try native.roundTrip(.delete(key: Array("shared".utf8))).status == .ok)
        #expect(try client.retrieve("get shared\r\n") == ["END"])
        // WATCH sees memcached's writes, each with the item's whole value.
        let watcher = try node.connect()
        _ = try NodeWatchTests.watch(watcher, CachetWatchRequest(prefix: Array("w:".utf8), includesValues: true))
        #expect(
            try client.exchange("set w:1 0 0 1\r\na\r\nappend w:1 0 0 1\r\nb\r\ndelete w:1\r\n", lines: 3) == [
                "STORED", "STORED", "DELETED",
            ]
        )
        let events = try (0..<3).map { _ in try NodeWatchTests.event(watcher) }
        #expect(events.map(\.kind) == [.put, .put, .delete])
        #expect(events[0].value == Array("a".utf8) && events[1].value == Array("ab".utf8))
    }

    @Test func aFlushWithADelayEmptiesTheNodeLaterAndMemLimitChangesIt() throws {
        let (node, port) = try Self.node()
        let client = try MemcacheTextClient(port: port)
        #expect(try client.exchange("set later 0 0 1\r\nx\r\n") == ["STORED"])
        #expect(try client.exchange("flush_all 1\r\n") == ["OK"])
        #expect(try client.retrieve("get later\r\n").count == 3, "still there before the delay")
        var gone = false
        for _ in 0..<40 where !gone {
            usleep(100_000)
            gone = try client.retrieve("get later\r\n") == ["END"]
        }
        #expect(gone)
        #expect(try client.exchange("cache_memlimit 64\r\n") == ["OK"])
        #expect(try node.stats()["memory_limit"] as? Int == 64 << 20)
    }

    @Test func usersSignInWithTheFirstSetAndKeepTheirPrefixes() throws {
        let directory = TemporaryDirectory(prefix: "cachet-memcache-users")
        defer { directory.remove() }
        let file = directory.appending("users.json")
        try NodeAuthTests.writeAuthFile(file, NodeAuthTests.users)
        let (node, port) = try Self.node(["--disk-limit", "0", "--auth-file", file])
        _ = node
        let client = try MemcacheTextClient(port: port)
        #expect(try client.exchange("get shop:a\r\n") == ["CLIENT_ERROR unauthenticated"])
        #expect(try client.exchange("set auth 0 0 10\r\nshop wrong\r\n") == ["CLIENT_ERROR authentication failure"])
        #expect(try client.exchange("set auth 0 0 27\r\nshop shop-secret-0123456789\r\n") == ["STORED"])
        #expect(try client.exchange("set shop:a 0 0 1\r\n1\r\n") == ["STORED"])
        #expect(try client.retrieve("get shop:a\r\n") == ["VALUE shop:a 0 1", "1", "END"])
        let refused = try client.exchange("set other 0 0 1\r\n1\r\n")
        #expect(refused.count == 1 && refused[0].hasPrefix("CLIENT_ERROR forbidden"), "\(refused)")
        let reader = try MemcacheTextClient(port: port)
        #expect(try reader.exchange("set auth 0 0 31\r\nreader reader-secret-0123456789\r\n") == ["STORED"])
        #expect(try reader.retrieve("get shop:a\r\n") == ["VALUE shop:a 0 1", "1", "END"])
        #expect(try reader.exchange("set shop:a 0 0 1\r\n2\r\n").first?.hasPrefix("CLIENT_ERROR forbidden") == true)
        // A meta get that only reads is a read for a reader too; one that touches writes.
        #expect(try reader.exchange("mg shop:a v\r\n", lines: 2) == ["VA 1", "1"])
        #expect(try reader.exchange("mg shop:a v T30\r\n").first?.hasPrefix("CLIENT_ERROR forbidden") == true)
    }

    @Test func itemsWrittenThroughTheMemcachedPortSurviveARestart() throws {
        let directory = TemporaryDirectory(prefix: "cachet-memcache-disk")
        defer { directory.remove() }
        let port = try NodeMetricsTests.freePort()
        let arguments = ["--memcached-port", "\(port)", "--data-dir", directory.path, "--disk-limit", "64MiB"]
        var node = try NodeProcess(arguments: arguments)
        var client = try MemcacheTextClient(port: port)
        #expect(try client.exchange("set kept 1234 0 4\r\ndata\r\n") == ["STORED"])
        let unique = try #require(try client.cas("kept"))
        #expect(node.stop() == 0)
        node = try NodeProcess(arguments: arguments)
        client = try MemcacheTextClient(port: port)
        #expect(try client.retrieve("gets kept\r\n") == ["VALUE kept 1234 4 \(unique)", "data", "END"])
        #expect(try client.exchange("cas kept 1 0 3 \(unique)\r\nnew\r\n") == ["STORED"])
    }

    @Test func aKeySentToAnyMemberIsRoutedAndFlushAllIsTheMembersOrTheClusters() throws {
        let (cluster, ports) = try Self.clusterWithMemcachedPorts()
        let settled = try cluster.waitUntilServing(within: 15)
        #expect(settled == nil, "\(settled ?? "")")
        let key = cluster.key(ownedBy: "n2")
        let first = try MemcacheTextClient(port: ports[0])
        let third = try MemcacheTextClient(port: ports[2])
        #expect(try first.exchange("set \(key) 5 0 2\r\nhi\r\n") == ["STORED"])
        let read = try third.retrieve("get \(key)\r\n")
        #expect(read == ["VALUE \(key) 5 2", "hi", "END"], "\(read)")
        #expect(try cluster.node("n2").connect().roundTrip(.get(key: Array(key.utf8))).body == Array("hi".utf8))
        #expect(
            try third.exchange("incr \(key) 1\r\n") == ["CLIENT_ERROR cannot increment or decrement non-numeric value"]
        )
        // flush_all through n1 empties n1 only (the key lives on n2).
        #expect(try first.exchange("flush_all\r\n") == ["OK"])
        #expect(try third.retrieve("get \(key)\r\n").count == 3)
        // With --memcached-flush cluster, every member.
        _ = cluster.node("n1").stop()
        try cluster.start("n1", extraArguments: ["--memcached-port", "\(ports[0])", "--memcached-flush", "cluster"])
        #expect(try cluster.waitUntilServing(within: 15) == nil)
        let again = try MemcacheTextClient(port: ports[0])
        #expect(try again.exchange("flush_all\r\n") == ["OK"])
        #expect(try third.retrieve("get \(key)\r\n") == ["END"])
    }
}

/// Hostile memcached clients on real sockets: half lines, pipelines never read, a byte at a time; the node's
/// connection memory stays within its budget and a well-behaved client is answered meanwhile.
@Suite("Node: memcached's port under hostile clients", .dedicatedThreads)
struct NodeMemcacheHostileTests {
    @Test func halfLinesUnreadPipelinesAndDrippedBytesStayWithinTheBudget() throws {
        let (node, port) = try NodeMemcacheTests.node([
            "--disk-limit", "0", "--connection-memory", "8MiB", "--max-frame", "4MiB",
        ])
        let good = try MemcacheTextClient(port: port)
        #expect(try good.exchange("set good 0 0 2\r\nok\r\n") == ["STORED"])
        var hostile: [MemcacheTextClient] = []
        // Half a line each.
        for index in 0..<100 {
            let client = try MemcacheTextClient(port: port)
            try client.send("get " + String(repeating: "k", count: 200 + index))
            hostile.append(client)
        }
        // Pipelines of gets of a 4 KiB value, never read (their replies fill the output, then the node stops
        // reading them).
        let value = String(repeating: "v", count: 4000)
        #expect(try good.exchange("set big 0 0 4000\r\n\(value)\r\n") == ["STORED"])
        for _ in 0..<20 {
            let client = try MemcacheTextClient(port: port)
            client.socket.setReceiveBuffer(4096)
            let burst = String(repeating: "get big\r\n", count: 2000)
            for _ in 0..<5 { try? client.send(burst) }
            hostile.append(client)
        }
        // One that drips a set a byte at a time, while the good one is answered.
        let dripper = try MemcacheTextClient(port: port)
        for byte in "set drip 0 0 4\r\ndrip\r\n".utf8 {
            try dripper.socket.send([byte])
            #expect(try good.retrieve("get good\r\n") == ["VALUE good 0 2", "ok", "END"])
        }
        #expect(try dripper.line() == "STORED")
        let stats = try node.stats()
        let used = stats["connection_memory_bytes"] as? Int ?? .max
        #expect(used <= 8 << 20 + (1 << 20), "connection memory \(used) within the 8 MiB budget (and a frame)")
        #expect(try good.retrieve("get drip\r\n") == ["VALUE drip 0 4", "drip", "END"])
        for client in hostile { client.socket.close() }
    }

    /// A memcached connection keeps the input its large sets grew (so the next set needs no regrowth), counted
    /// in the budget; when another connection waits for memory, idle connections give theirs back, so that
    /// what they kept never holds the others back.
    @Test func inputsKeptForLargeSetsAreGivenBackWhenAnotherWaits() throws {
        let (node, port) = try NodeMemcacheTests.node([
            "--disk-limit", "0", "--connection-memory", "8MiB", "--max-frame", "4MiB",
            "--memcached-item-size", "1MiB",
        ])
        let value = String(repeating: "v", count: 900_000)
        var clients: [MemcacheTextClient] = []
        // Each keeps about 1 MiB; together more than the budget: the later ones wait until the earlier,
        // idle by then, give theirs back.
        for index in 0..<14 {
            let client = try MemcacheTextClient(port: port)
            #expect(try client.exchange("set kept-\(index) 0 0 \(value.utf8.count)\r\n\(value)\r\n") == ["STORED"])
            clients.append(client)
        }
        let stats = try node.stats()
        #expect(
            (stats["connection_memory_bytes"] as? Int ?? .max) <= 9 << 20,
            "\(stats["connection_memory_bytes"] ?? "")"
        )
        #expect(try clients[0].retrieve("get kept-13\r\n").count == 3)
    }

    /// A set's data block grows the session's buffer of native requests to its length: given back once the
    /// command is served (the connection keeps only its input, for its next set), and everything kept is
    /// counted in the connections' budget: nothing large is held outside it.
    @Test func idleConnectionsThatSentLargeSetsHoldNoLargeBuffers() throws {
        let (node, port) = try NodeMemcacheTests.node(["--disk-limit", "0", "--memcached-item-size", "1MiB"])
        let pid = node.process.processIdentifier
        let value = String(repeating: "v", count: 900_000)
        let baseline = residentBytes(of: pid)
        var clients: [MemcacheTextClient] = []
        for index in 0..<60 {
            let client = try MemcacheTextClient(port: port)
            #expect(try client.exchange("set large-\(index % 4) 0 0 \(value.utf8.count)\r\n\(value)\r\n") == ["STORED"])
            clients.append(client)
        }
        // Every connection idle now: its input kept (about 1 MiB), its buffer of native requests trimmed.
        let stats = try node.stats()
        let charged = stats["connection_memory_bytes"] as? Int ?? .max
        #expect(charged < 60 * 1_400_000, "idle connections hold \(charged) bytes of the budget")
        let grown = residentBytes(of: pid) - baseline
        // Four values of 900 KB are stored; what the connections keep is all counted.
        #expect(underAddressSanitizer || grown < charged + (24 << 20), "the node grew by \(grown) bytes")
        withExtendedLifetime(clients) {}
    }
}

/// A cluster whose members speak memcached's protocol, under load through two members while a third is
/// killed (SIGKILL) and restarted: no read returns a value older than one acknowledged before it was asked
/// for (CLUSTER.md's guarantee, kept on the memcached port), and the load goes on. (Checked failing: with
/// `--hold-period 0`, which turns the guarantee off, 26 and 321 stale reads in two runs.)
@Suite("Node: memcached's port in a cluster with a member killed", .dedicatedThreads)
struct NodeMemcacheFailoverTests {
    @Test func noReadThroughTheMemcachedPortIsStaleWhileAMemberIsKilledAndReturns() throws {
        let ports = try (0..<3).map { _ in try NodeMetricsTests.freePort() }
        let cluster = try NodeForwardingTests.Cluster(disk: true)
        func start(_ index: Int) throws {
            try cluster.start("n\(index + 1)", extraArguments: ["--memcached-port", "\(ports[index])"])
        }
        for index in 0..<3 {
            _ = cluster.node("n\(index + 1)").stop()
            try start(index)
        }
        #expect(try cluster.waitUntilServing(within: 15) == nil)
        let writer = try MemcacheTextClient(port: ports[0])
        let reader = try MemcacheTextClient(port: ports[1])
        writer.socket.setTimeout(5)
        reader.socket.setTimeout(5)
        let keys = (0..<24).map { "load\($0)" }
        var acknowledged = [String: Int]()
        var (stale, stored, refused, reads) = (0, 0, 0, 0)
        let started = Date()
        var killed = false
        var restarted = false
        var version = 0
        while Date().timeIntervalSince(started) < 6 {
            let elapsed = Date().timeIntervalSince(started)
            if !killed && elapsed > 1.5 {
                _ = cluster.node("n3").stop(signal: SIGKILL)
                killed = true
            }
            if killed && !restarted && elapsed > 3 {
                try start(2)
                restarted = true
            }
            version += 1
            let key = keys[version % keys.count]
            let value = "\(version)"
            let answer = try writer.exchange("set \(key) 0 0 \(value.utf8.count)\r\n\(value)\r\n")
            if answer == ["STORED"] {
                stored += 1
                acknowledged[key] = version
            } else {
                refused += 1
            }
            // Read another key through the second member: never older than its last acknowledged write.
            let other = keys[(version * 7) % keys.count]
            let floor = acknowledged[other] ?? 0
            let lines = try reader.retrieve("get \(other)\r\n")
            reads += 1
            if lines.count == 3, let read = Int(lines[1]), read < floor { stale += 1 }
        }
        #expect(stale == 0, "\(stale) stale reads of \(reads)")
        #expect(stored > refused, "\(stored) writes stored, \(refused) refused")
        #expect(killed && restarted)
    }
}
