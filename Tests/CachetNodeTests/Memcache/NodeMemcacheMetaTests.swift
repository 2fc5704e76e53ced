import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// memcached's meta protocol on a node's memcached port (`docs/memcached.md`, "The meta protocol"), by real
/// node processes over real sockets: every command, the flags each returns in the order sent, quiet mode
/// with `mn`, base64 keys, CAS returns and checks, vivify-on-miss as the node's lease (one `W`, then `Z`),
/// every error line, pipelined with the text commands, and items read through the native protocol.
@Suite("Node: memcached's meta protocol", .dedicatedThreads)
struct NodeMemcacheMetaTests {
    @Test func getSetDeleteArithmeticNoopAndDebug() throws {
        let (node, port) = try NodeMemcacheTests.node()
        defer { withExtendedLifetime(node) {} }
        let client = try MemcacheTextClient(port: port)
        #expect(try client.exchange("mn\r\n") == ["MN"])
        let stored = try client.exchange("ms foo 3 F5 T0 c Oab k\r\nbar\r\n")[0]
        let parts = stored.split(separator: " ")
        #expect(
            parts.count == 4 && parts[0] == "HD" && parts[1].hasPrefix("c") && parts[2] == "Oab" && parts[3] == "kfoo"
        )
        let cas = String(parts[1].dropFirst())
        // The flags come back in the order sent.
        #expect(
            try client.exchange("mg foo s v t f c k O9\r\n", lines: 2) == ["VA 3 s3 t-1 f5 c\(cas) kfoo O9", "bar"]
        )
        #expect(try client.exchange("mg foo\r\n") == ["HD"], "no v: no value")
        #expect(try client.exchange("mg foo v C\(cas)\r\n") == ["HD"], "the CAS the client has: no value sent")
        #expect(try client.exchange("mg missing v Ox k\r\n") == ["EN Ox kmissing"])
        // Quiet: misses and nominal replies are not sent; mn shows where they end.
        #expect(
            try client.exchange("mg missing v q\r\nms quiet 1 q\r\nq\r\nmd missing q\r\nmn\r\n", lines: 2) == [
                "NF", "MN",
            ]
        )
        #expect(try client.exchange("ms foo 1 ME\r\nx\r\n") == ["NS"], "add over a value")
        #expect(try client.exchange("ms none 1 MR\r\nx\r\n") == ["NS"], "replace without one")
        #expect(try client.exchange("ms foo 2 MA\r\n!!\r\nms foo 2 MP\r\n<<\r\n", lines: 2) == ["HD", "HD"])
        #expect(try client.exchange("mg foo v\r\n", lines: 2) == ["VA 7", "<<bar!!"])
        #expect(try client.exchange("ms foo 1 C\(cas)\r\nx\r\n") == ["EX"], "the CAS changed with the append")
        #expect(try client.exchange("ms absent 1 C1\r\nx\r\n") == ["NF"])
        let debug = try client.exchange("me foo\r\n")[0]
        #expect(debug.hasPrefix("ME foo exp=-1 la=0 cas=") && debug.hasSuffix(" size=7"), "\(debug)")
        #expect(debug.contains(" fetch=yes "), "read by the mg above: \(debug)")
        // `me` itself marks nothing.
        #expect(try client.exchange("ms fresh 1\r\nx\r\n") == ["HD"])
        for _ in 0..<2 {
            let fresh = try client.exchange("me fresh\r\n")[0]
            #expect(fresh.hasPrefix("ME fresh exp=-1 la=0 cas=") && fresh.hasSuffix(" fetch=no size=1"), "\(fresh)")
        }
        #expect(try client.exchange("me absent\r\n") == ["EN"])
        // Arithmetic: incr by default, D the delta, MD decrement stopping at 0, v the value.
        #expect(try client.exchange("ms n 2\r\n10\r\n") == ["HD"])
        #expect(try client.exchange("ma n\r\n") == ["HD"])
        #expect(try client.exchange("ma n v D5\r\n", lines: 2) == ["VA 2", "16"])
        #expect(try client.exchange("ma n v MD D100\r\n", lines: 2) == ["VA 1", "0"])
        #expect(try client.exchange("ms n 20\r\n18446744073709551615\r\nma n v\r\n", lines: 3) == ["HD", "VA 1", "0"])
        #expect(try client.exchange("ma absent\r\n") == ["NF"])
        #expect(try client.exchange("ma foo\r\n") == ["CLIENT_ERROR cannot increment or decrement non-numeric value"])
        #expect(try client.exchange("ma n T100 v\r\n", lines: 2) == ["VA 1", "1"])
        #expect(try client.exchange("mg n t v\r\n", lines: 2) == ["VA 1 t100", "1"], "ma's T set the TTL")
        #expect(try client.exchange("md foo Oz k\r\nmd foo\r\n", lines: 2) == ["HD Oz kfoo", "NF"])
        // T on mg touches; a past expiry deletes.
        #expect(try client.exchange("mg n T50 t v\r\n", lines: 2) == ["VA 1 t50", "1"])
        #expect(try client.exchange("ms n 1 T-1\r\n5\r\nmg n v\r\n", lines: 2) == ["HD", "EN"])
    }

    @Test func conditionalDeletesAndCountersCreatedOnAMiss() throws {
        let (node, port) = try NodeMemcacheTests.node()
        defer { withExtendedLifetime(node) {} }
        let client = try MemcacheTextClient(port: port)
        let stored = try client.exchange("ms key 2 c\r\nhi\r\n")[0]
        let cas = try #require(UInt64(stored.dropFirst("HD c".count)))
        #expect(try client.exchange("md key C\(cas + 1)\r\n") == ["EX"], "another CAS: kept")
        #expect(try client.exchange("mg key v\r\n", lines: 2) == ["VA 2", "hi"])
        #expect(try client.exchange("md key C\(cas) q\r\nmg key v\r\n") == ["EN"], "its CAS: deleted")
        #expect(try client.exchange("md key C\(cas)\r\n") == ["NF"])
        // N creates the counter holding J on a miss (answered J), then counts from it; t its TTL left.
        #expect(try client.exchange("ma counter N100 J13 v t\r\n", lines: 2) == ["VA 2 t100", "13"])
        #expect(try client.exchange("ma counter N100 J13 v\r\n", lines: 2) == ["VA 2", "14"])
        #expect(try client.exchange("ma counter N100 MD D20 v\r\n", lines: 2) == ["VA 1", "0"])
        let counted = try client.exchange("ma counter c v\r\n", lines: 2)
        let unique = try #require(UInt64(counted[0].dropFirst("VA 1 c".count)))
        #expect(try client.exchange("ma counter C\(unique + 1) v\r\n") == ["EX"], "another CAS: not counted")
        #expect(try client.exchange("ma counter C\(unique) v\r\n", lines: 2) == ["VA 1", "2"])
        #expect(try client.exchange("ma missing t v\r\n") == ["NF"])
    }

    @Test func base64KeysAndTheTextCommandsShareItems() throws {
        let (node, port) = try NodeMemcacheTests.node()
        let client = try MemcacheTextClient(port: port)
        // "foo" in base64 is "Zm9v"; a key with a space ("a b") is "YSBi".
        #expect(try client.exchange("ms Zm9v 3 b F7\r\nbin\r\n") == ["HD"])
        #expect(try client.retrieve("get foo\r\n") == ["VALUE foo 7 3", "bin", "END"])
        #expect(try client.exchange("mg Zm9v b k v\r\n", lines: 2) == ["VA 3 kZm9v b", "bin"])
        #expect(try client.exchange("ms YSBi 2 b\r\nsp\r\nmg YSBi b v\r\n", lines: 3) == ["HD", "VA 2", "sp"])
        #expect(try node.connect().roundTrip(.get(key: Array("a b".utf8))).body == Array("sp".utf8))
        #expect(try client.exchange("mg !!!! b v\r\n") == ["CLIENT_ERROR error decoding key"])
        // A text set read by mg, with its flags and gets's CAS.
        #expect(try client.exchange("set text 9 0 2\r\nhi\r\n") == ["STORED"])
        let unique = try #require(try client.cas("text"))
        #expect(try client.exchange("mg text f c v\r\n", lines: 2) == ["VA 2 f9 c\(unique)", "hi"])
        // Pipelined with text commands: replies in order.
        try client.send("get text\r\nmn\r\nmg text v\r\ndelete text\r\nmg text v\r\nmn\r\n")
        #expect(try client.lines(8) == ["VALUE text 9 2", "hi", "END", "MN", "VA 2", "hi", "DELETED", "EN"])
        #expect(try client.line() == "MN")
    }

    @Test func vivifyOnMissGivesOneCallerTheWinAndTheOthersZ() throws {
        let (node, port) = try NodeMemcacheTests.node(["--disk-limit", "0", "--lease-time", "2"])
        defer { withExtendedLifetime(node) {} }
        let first = try MemcacheTextClient(port: port)
        let second = try MemcacheTextClient(port: port)
        #expect(try first.exchange("mg hot v t N30\r\n", lines: 2) == ["VA 0 t30 W", ""], "the stub, won")
        #expect(try second.exchange("mg hot v N30\r\n", lines: 2) == ["VA 0 Z", ""], "another caller loads it")
        #expect(try second.exchange("mg hot s N30\r\n") == ["HD s0 Z"])
        // The winner stores the value: everyone reads it, no flag.
        #expect(try first.exchange("ms hot 5 T60\r\nvalue\r\n") == ["HD"])
        #expect(try second.exchange("mg hot v N30\r\n", lines: 2) == ["VA 5", "value"])
        // The win lasts as long as the empty item: a winner that never stores keeps the others waiting that
        // long (as memcached's stub does), then the next miss wins.
        #expect(try first.exchange("mg cold N2\r\n") == ["HD W"])
        #expect(try second.exchange("mg cold N2 v\r\n", lines: 2) == ["VA 0 Z", ""])
        Thread.sleep(forTimeInterval: 2.2)
        #expect(try second.exchange("mg cold N2\r\n") == ["HD W"])
    }

    /// The CAS unique in a meta reply's `c` flag.
    static func cas(in line: String) -> UInt64? {
        line.split(separator: " ").first { $0.hasPrefix("c") }.flatMap { UInt64($0.dropFirst()) }
    }

    /// Serve-stale (`md I`) and early recache (`mg R`) as memcached's meta protocol has them, on the node's
    /// lease: a stale item is served with `X`, its first reader wins the recache (`W`) and the others are told
    /// someone does (`Z`); a write by an older CAS unique (`ms I`) leaves it stale; a write by the current one
    /// makes it fresh; a winner that never stores loses the win after `--lease-time`.
    @Test func staleItemsAreServedWithXAndOneReaderWinsTheirRecache() throws {
        let (node, port) = try NodeMemcacheTests.node(["--disk-limit", "0", "--lease-time", "2"])
        let first = try MemcacheTextClient(port: port)
        let second = try MemcacheTextClient(port: port)
        #expect(try first.exchange("set page 0 0 2\r\nv1\r\n") == ["STORED"])
        let fresh = try first.exchange("mg page c v\r\n", lines: 2)
        let original = try #require(Self.cas(in: fresh[0]))
        #expect(try first.exchange("md page I T30\r\n") == ["HD"])
        // The first reader of the stale item wins; it has a new CAS unique and the TTL md gave it.
        let won = try first.exchange("mg page c t v\r\n", lines: 2)
        let invalidated = try #require(Self.cas(in: won[0]))
        #expect(won == ["VA 2 c\(invalidated) t30 X W", "v1"] && invalidated != original, "\(won)")
        #expect(try second.exchange("mg page v\r\n", lines: 2) == ["VA 2 Z X", "v1"])
        // A native GET reads the stale value as any.
        #expect(try node.connect().roundTrip(.get(key: Array("page".utf8))).body == Array("v1".utf8))
        // A write loaded before the invalidation (its CAS is older): stored, still stale, the win kept.
        #expect(try second.exchange("ms page 2 I C\(original) T90\r\nv0\r\n") == ["HD"])
        let still = try second.exchange("mg page c t v\r\n", lines: 2)
        #expect(still[0].hasSuffix("t30 Z X") && still[1] == "v0", "\(still)")
        // Without I, an older CAS unique is refused; with the current one the item is fresh again.
        #expect(try second.exchange("ms page 2 C\(original)\r\nvx\r\n") == ["EX"])
        #expect(try second.exchange("mg page\r\n") == ["HD Z X"], "a refused write is no write: the win stands")
        // Nor does any other refused write end it, or the staleness: add, append with a CAS, md with a CAS.
        #expect(try second.exchange("ms page 2 ME\r\nvy\r\n") == ["NS"])
        #expect(try second.exchange("ms page 1 MA C5\r\nz\r\n") == ["EX"])
        #expect(try second.exchange("md page I C5\r\n") == ["EX"])
        #expect(try second.exchange("mg page\r\n") == ["HD Z X"])
        let current = try #require(Self.cas(in: still[0]))
        #expect(try first.exchange("ms page 2 C\(current) T90\r\nv2\r\n") == ["HD"])
        #expect(try second.exchange("mg page v\r\n", lines: 2) == ["VA 2", "v2"])
        // A winner that never stores: after --lease-time, the next reader of the stale item wins.
        #expect(try first.exchange("md page I q\r\nmn\r\n") == ["MN"])
        #expect(try first.exchange("mg page\r\n") == ["HD X W"])
        #expect(try second.exchange("mg page\r\n") == ["HD Z X"])
        Thread.sleep(forTimeInterval: 2.3)
        #expect(try second.exchange("mg page\r\n") == ["HD X W"])
        // Any write ends staleness and win: a plain set.
        #expect(try first.exchange("set page 0 0 2\r\nv3\r\n") == ["STORED"])
        #expect(try second.exchange("mg page v\r\n", lines: 2) == ["VA 2", "v3"])
        // Early recache: an item expiring within R's seconds is won by one reader.
        #expect(try first.exchange("ms soon 1 T10\r\ns\r\n") == ["HD"])
        #expect(try first.exchange("mg soon R30 v\r\n", lines: 2) == ["VA 1 W", "s"])
        #expect(try second.exchange("mg soon R30 v\r\n", lines: 2) == ["VA 1 Z", "s"])
        #expect(try second.exchange("mg soon\r\n") == ["HD Z"], "a plain read is told someone recaches")
        #expect(try second.exchange("mg later R5\r\n") == ["EN"])
        #expect(try first.exchange("ms far 1 T100\r\nf\r\n") == ["HD"])
        #expect(try first.exchange("mg far R30\r\n") == ["HD"], "not expiring within R's seconds")
        // md x leaves an empty item; E gives a write the client's CAS unique; a missing item is NF.
        #expect(try first.exchange("md far x\r\n") == ["HD"])
        #expect(try first.exchange("mg far s v\r\n", lines: 2) == ["VA 0 s0", ""])
        #expect(try first.exchange("ms far 1 E777 c\r\ne\r\n") == ["HD c777"])
        #expect(try first.exchange("md nothing I\r\n") == ["NF"])
        #expect(try first.exchange("md far I C5\r\n") == ["EX"], "a CAS that does not match")
        // Appends with a CAS, creating on a miss (N), answered with the new length.
        #expect(try first.exchange("ms log 1 MA N30 s\r\na\r\n") == ["HD s1"])
        #expect(try first.exchange("ms log 1 MA s\r\nb\r\n") == ["HD s2"])
        #expect(try first.exchange("ms log 1 MA C5\r\nc\r\n") == ["EX"])
        #expect(try first.exchange("mg log v\r\n", lines: 2) == ["VA 2", "ab"])
    }

    /// Stale marks and wins live with the item on its owner: a client of any member sees the same.
    @Test func staleItemsAndWinsAreTheOwnersThroughAnyMember() throws {
        let (cluster, ports) = try NodeMemcacheTests.clusterWithMemcachedPorts()
        #expect(try cluster.waitUntilServing(within: 15) == nil)
        let key = cluster.key(ownedBy: "n2")
        let first = try MemcacheTextClient(port: ports[0])
        let third = try MemcacheTextClient(port: ports[2])
        #expect(try first.exchange("ms \(key) 2 T60\r\nv1\r\n") == ["HD"])
        #expect(try third.exchange("md \(key) I\r\n") == ["HD"])
        #expect(try first.exchange("mg \(key) v\r\n", lines: 2) == ["VA 2 X W", "v1"])
        #expect(try third.exchange("mg \(key) v\r\n", lines: 2) == ["VA 2 Z X", "v1"])
        let owner = try MemcacheTextClient(port: ports[1])
        #expect(try owner.exchange("mg \(key)\r\n") == ["HD Z X"])
        #expect(try third.exchange("ms \(key) 2\r\nv2\r\n") == ["HD"])
        #expect(try first.exchange("mg \(key) v\r\n", lines: 2) == ["VA 2", "v2"])
    }

    /// `mg h` (read since it was stored), `mg u` (a read that marks nothing) and `mg l` (seconds since the last
    /// access), on a node with a disk tier (whose writes look the key up first: a look-up of the node's own
    /// must not count as a read) and through touches (which keep the mark, as memcached's touch in place).
    @Test func hitBeforeAndLastAccessFollowReadsTouchesAndWrites() throws {
        let directory = TemporaryDirectory()
        let (node, port) = try NodeMemcacheTests.node(["--data-dir", directory.path])
        defer { withExtendedLifetime(node) {} }
        let client = try MemcacheTextClient(port: port)
        #expect(try client.exchange("set k 0 0 1\r\nx\r\n") == ["STORED"])
        #expect(try client.exchange("mg k u h\r\n") == ["HD h0"], "not read yet")
        #expect(try client.exchange("mg k h l\r\n") == ["HD h0 l0"], "a read that does not mark leaves it so")
        #expect(try client.exchange("mg k h\r\n") == ["HD h1"])
        // A refused add looks the item up: not a read.
        #expect(try client.exchange("set j 0 0 1\r\ny\r\n") == ["STORED"])
        #expect(try client.exchange("add j 0 0 1\r\nz\r\n") == ["NOT_STORED"])
        #expect(try client.exchange("mg j h\r\n") == ["HD h0"])
        // Touches keep the mark; a get-and-touch is a read; a write starts over.
        #expect(try client.exchange("touch k 100\r\n") == ["TOUCHED"])
        #expect(try client.exchange("mg k h\r\n") == ["HD h1"])
        #expect(try client.exchange("set k 0 0 1\r\nx\r\n") == ["STORED"])
        #expect(try client.retrieve("gat 100 k\r\n") == ["VALUE k 0 1", "x", "END"])
        #expect(try client.exchange("mg k h T100\r\n") == ["HD h1"])
        #expect(try client.exchange("set k 0 0 1\r\nx\r\n") == ["STORED"])
        #expect(try client.exchange("mg k T100 u h\r\n") == ["HD h0"])
        #expect(try client.exchange("mg k h\r\n") == ["HD h0"], "a touch with u did not mark it")
    }

    /// A meta get that only reads travels as an item write, but a member that holds its keys (here: it
    /// reaches a minority) answers it as the read it is: a miss, not a refused write, and its copy stays for
    /// when it serves again.
    @Test func aMetaGetWhileTheOwnerHoldsIsAMissAndKeepsTheValue() throws {
        let (cluster, ports) = try NodeMemcacheTests.clusterWithMemcachedPorts()
        #expect(try cluster.waitUntilServing(within: 15) == nil)
        let key = cluster.key(ownedBy: "n1")
        let client = try MemcacheTextClient(port: ports[0])
        #expect(try client.exchange("ms \(key) 2\r\nv1\r\n") == ["HD"])
        // n1 alone: the others stopped, it reaches a minority and holds its keys.
        _ = cluster.node("n3").stop(signal: SIGKILL)
        #expect(freeze(cluster.node("n2").process.processIdentifier), "n2 stopped")
        defer { kill(cluster.node("n2").process.processIdentifier, SIGCONT) }
        let other = cluster.key(ownedBy: "n2")
        _ = try client.exchange("mg \(other) v\r\n")  // a forward to the frozen member times out
        var deadline = Date().addingTimeInterval(10)
        while try cluster.stats("n1")["in_minority"] as? Bool != true && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(try cluster.stats("n1")["in_minority"] as? Bool == true)
        #expect(try client.exchange("mg \(key) v\r\n") == ["EN"], "a miss, not SERVER_ERROR")
        #expect(try client.exchange("mg \(key) v u h\r\n") == ["EN"], "one that does not mark the item reads too")
        #expect(try client.exchange("mg \(key) v T30\r\n").first?.hasPrefix("SERVER_ERROR") == true, "a touch writes")
        // Thawed: a majority again, and after its hold (11 s at most by default) n1 serves the value it kept.
        kill(cluster.node("n2").process.processIdentifier, SIGCONT)
        deadline = Date().addingTimeInterval(40)
        var read = try client.exchange("mg \(key) v\r\n")
        while read == ["EN"] && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.1)
            read = try client.exchange("mg \(key) v\r\n")
        }
        let value = read == ["VA 2"] ? try client.line() : ""
        #expect(read == ["VA 2"] && value == "v1", "\(read)")
    }

    @Test(arguments: [
        ("mg foo x\r\n", "CLIENT_ERROR invalid flag"),
        ("mg foo v v\r\n", "CLIENT_ERROR duplicate flag"),
        ("mg foo Tabc\r\n", "CLIENT_ERROR bad token in command line format"),
        ("mg foo O" + String(repeating: "o", count: 33) + "\r\n", "CLIENT_ERROR opaque token too long"),
        ("mg\r\n", "CLIENT_ERROR bad command line format"),
        ("mg " + String(repeating: "k", count: 251) + " v\r\n", "CLIENT_ERROR bad command line format"),
        ("ms foo abc\r\n", "CLIENT_ERROR bad data chunk"),
        ("ms foo 1 MX\r\nx\r\n", "CLIENT_ERROR invalid mode for ms STORE"),
        ("ma foo MX\r\n", "CLIENT_ERROR invalid mode for ma"),
        ("ms foo 1 ME C5\r\nx\r\n", "CLIENT_ERROR flag C is supported with modes S, A and P only by this server"),
        ("ms foo 1 MR C5\r\nx\r\n", "CLIENT_ERROR flag C is supported with modes S, A and P only by this server"),
    ])
    func badMetaCommandsGetTheirErrorLineAndTheConnectionGoesOn(command: String, error: String) throws {
        let (node, port) = try NodeMemcacheTests.node()
        defer { withExtendedLifetime(node) {} }
        let client = try MemcacheTextClient(port: port)
        #expect(try client.exchange(command) == [error])
        #expect(try client.exchange("mn\r\n") == ["MN"], "the connection goes on")
    }
}
