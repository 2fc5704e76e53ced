import CachetCLIKit
import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// `--cluster stats` and `--cluster clear`. No node fans out yet, so the aggregate replies are built with
/// the codec (`CachetClusterClearReply`, `CachetClusterStatsReply`) and the formatting is checked on
/// them; against a real node the flag is sent and the node's single-node answer is labelled as such.
@Suite("cachet-cli --cluster", .dedicatedThreads)
struct CachetCLIClusterTests {
    static let statsN1 = #"{"items":3,"memory_bytes":300,"gets":7,"hits":5,"version":"0.1.0"}"#

    @Test func clusterClearListsEveryMemberWithItsFiguresOrError() {
        let body = CachetClusterClearReply(members: [
            .init(id: "n1", status: .ok, result: CachetClearResult(items: 2, bytes: 11)),
            .init(id: "n2-long", status: .unavailable, message: "n2-long (127.0.0.1:7421): connection refused"),
            .init(id: "n3", status: .ok, result: CachetClearResult(items: 5, bytes: 1000)),
        ]).encoded
        let (lines, allAnswered) = CachetCLIFormatter.clusterClear(body)
        #expect(
            lines == [
                "OK (removed 7 items, 1011 bytes; 2 of 3 members answered)",
                "n1       OK  removed 2 items, 11 bytes",
                "n2-long  UNAVAILABLE  n2-long (127.0.0.1:7421): connection refused",
                "n3       OK  removed 5 items, 1000 bytes",
            ]
        )
        #expect(!allAnswered)
    }

    @Test func aSingleNodeClearBodyIsLabelled() {
        let (lines, allAnswered) = CachetCLIFormatter.clusterClear(CachetClearResult(items: 1, bytes: 6).encoded)
        #expect(lines.first == "OK (removed 1 items, 6 bytes)")
        #expect(lines.last?.hasPrefix("note: the node answered for itself only") == true)
        #expect(allAnswered)
    }

    @Test func aMalformedAggregateIsAnError() {
        let (lines, allAnswered) = CachetCLIFormatter.clusterClear(Array(repeating: 0, count: 17))
        #expect(lines.first?.hasPrefix("ERROR: malformed cluster CLEAR reply") == true && !allAnswered)
    }

    @Test func clusterStatsPrintsTotalsAndEveryMemberById() {
        let body = CachetClusterStatsReply(
            answeredBy: "n1",
            clusterHash: "b16d03ee9c093d78",
            members: [
                .init(id: "n1", status: .ok, body: Array(Self.statsN1.utf8)),
                .init(id: "n3", status: .unavailable, body: Array("n3 (127.0.0.1:7422): connection refused".utf8)),
            ]
        ).encoded
        let (lines, allAnswered) = CachetCLIFormatter.clusterStats(body)
        #expect(lines[0] == "cluster b16d03ee9c093d78 answered by n1: 1 of 2 members answered")
        #expect(lines[1].hasPrefix("totals  items=3 memory_bytes=300 memory_limit=0 gets=7 hits=5 misses=0"))
        #expect(lines[2] == "n1      items=3 memory_bytes=300 gets=7 hits=5")
        #expect(lines[3] == "n3      UNAVAILABLE  n3 (127.0.0.1:7422): connection refused")
        #expect(lines[4].hasPrefix("(items: entries in memory; disk_items: entries on disk"))
        #expect(lines.count == 5 && !allAnswered)
    }

    @Test func againstANodeThatDoesNotFanOutTheFlagIsSentAndTheAnswerLabelled() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let port = "\(node.port)"
        #expect(try runCLI(["--port", port, "put", "k", "v"]).status == 0)
        let (stats, statsStatus) = try runCLI(["--port", port, "--trace", "--cluster", "stats"])
        #expect(stats.contains("op=STATS(0x05) flags=0x0002"), "\(stats)")
        #expect(stats.contains("note: the node answered for itself only"), "\(stats)")
        #expect(stats.contains("items ") && statsStatus == 0)
        let (clear, clearStatus) = try runCLI(["--port", port, "--cluster", "clear"])
        #expect(
            clear
                == "OK (removed 1 items, 2 bytes)\nnote: the node answered for itself only; it does not fan out cluster-wide CLEAR\n"
        )
        #expect(clearStatus == 0)
        // Without --cluster nothing changes: flags 0.
        let (plain, _) = try runCLI(["--port", port, "--trace", "stats"])
        #expect(plain.contains("flags=0x0000") && !plain.contains("note:"))
    }
}
