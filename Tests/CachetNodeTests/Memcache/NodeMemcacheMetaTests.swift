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
        #expect(debug.hasPrefix("ME foo exp=-1 cas=") && debug.hasSuffix(" size=7"), "\(debug)")
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
        // A lease whose holder never stores ends after --lease-time: the next miss wins.
        #expect(try first.exchange("mg cold N30\r\n") == ["HD W"])
        #expect(try second.exchange("mg cold N30\r\n") == ["HD Z"])
        Thread.sleep(forTimeInterval: 2.2)
        #expect(try second.exchange("mg cold N30\r\n") == ["HD W"])
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
        ("mg foo h\r\n", "CLIENT_ERROR flag h is not supported by this server"),
        ("md foo I\r\n", "CLIENT_ERROR flag I is not supported by this server"),
        ("ms foo 1 I\r\nx\r\n", "CLIENT_ERROR flag I is not supported by this server"),
        ("ma foo E5\r\n", "CLIENT_ERROR flag E is not supported by this server"),
        ("ms foo 1 MA C5\r\nx\r\n", "CLIENT_ERROR flag C is supported with mode S only by this server"),
    ])
    func badMetaCommandsGetTheirErrorLineAndTheConnectionGoesOn(command: String, error: String) throws {
        let (node, port) = try NodeMemcacheTests.node()
        defer { withExtendedLifetime(node) {} }
        let client = try MemcacheTextClient(port: port)
        #expect(try client.exchange(command) == [error])
        #expect(try client.exchange("mn\r\n") == ["MN"], "the connection goes on")
    }
}
