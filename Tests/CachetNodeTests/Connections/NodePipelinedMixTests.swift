import CachetTestSupport
import CachetWire
import Dispatch
import Foundation
import Testing

/// A client that pipelines is never left without replies: batches written in one go while the replies
/// are read, large values on both sides, against a real node process.
///
/// The suite runs each mix briefly. `Benchmarks/pipeline-mix.sh` runs the same tests for minutes with
/// more connections and seeds, through the environment: `CACHET_MIX_SECONDS` (per mix),
/// `CACHET_MIX_SEED` (the first seed), `CACHET_MIX_CONNECTIONS`.
@Suite("Node: pipelined mixes get every reply", .dedicatedThreads)
struct NodePipelinedMixTests {
    static let environment = ProcessInfo.processInfo.environment
    static let seconds = environment["CACHET_MIX_SECONDS"].flatMap(Double.init)
    static let firstSeed = environment["CACHET_MIX_SEED"].flatMap(UInt64.init) ?? 39
    static let connections = environment["CACHET_MIX_CONNECTIONS"].flatMap(Int.init)

    /// The shortest known way to the stall: four GETs of 1 MiB values fill the 4 MiB of pending replies
    /// from one full read of the input; the output drains within the same event, and the PUT and GET
    /// behind them, partly still in the socket, must be read and answered although no new bytes arrive.
    @Test func requestsLeftInTheSocketWhenTheOutputPausedAreAnswered() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let setup = try node.connect()
        let large = PatternBytes.make(count: 1 << 20, step: 3)
        for key in ["a", "b", "c", "d"] {
            #expect(try setup.roundTrip(.put(key: Array(key.utf8), value: large, ttl: 0)).status == .ok)
        }
        let commands: [CachetCommand] = [
            .put(key: Array("z".utf8), value: PatternBytes.make(count: 480), ttl: 0),
            .get(key: Array("a".utf8)), .get(key: Array("b".utf8)), .get(key: Array("c".utf8)),
            .get(key: Array("d".utf8)),
            .put(key: Array("x".utf8), value: PatternBytes.make(count: 4_800), ttl: 0),
            .get(key: Array("y".utf8)),
        ]
        var batch: [UInt8] = []
        for (offset, command) in commands.enumerated() { command.encode(id: UInt32(offset + 1), to: &batch) }
        // It stalled three times in four: eight tries.
        for attempt in 0..<8 {
            let client = try node.connect()
            client.setTimeout(5)
            let bytes = batch
            DispatchQueue.global().async { try? client.send(bytes) }
            for id in 1...UInt32(commands.count) {
                let reply: CachetResponse
                do {
                    reply = try client.readResponse()
                } catch {
                    Issue.record("attempt \(attempt): reply \(id) of \(commands.count) never came: \(error)")
                    return
                }
                #expect(reply.id == id)
                #expect(reply.status == (id == 7 ? .notFound : .ok))
                if (2...5).contains(id) { #expect(PatternBytes.equal(reply.body, large)) }
            }
            client.close()
        }
    }

    /// A node configuration to drive a mix against.
    struct Setup: CustomTestStringConvertible, Sendable {
        var name: String
        var arguments: [String]
        /// Whether a GET may miss what its connection wrote (a memory tier the mix overflows).
        var missesAllowed: Bool
        var testDescription: String { name }
    }

    static let setups = [
        Setup(
            name: "memory only, 16 MiB",
            arguments: ["--memory-limit", "16MiB", "--disk-limit", "0"],
            missesAllowed: true
        ),
        Setup(
            name: "memory only, 1 GiB",
            arguments: ["--memory-limit", "1GiB", "--disk-limit", "0"],
            missesAllowed: false
        ),
        Setup(
            name: "16 MiB in memory, 64 MiB on disk",
            arguments: ["--memory-limit", "16MiB", "--disk-limit", "64MiB"],
            missesAllowed: true
        ),
    ]

    @Test(arguments: setups)
    func aSeededPipelinedMixGetsEveryReplyAndTheValuesWritten(_ setup: Setup) throws {
        let node = try NodeProcess(arguments: setup.arguments)
        var configuration = PipelinedMix.Configuration(seed: Self.firstSeed)
        configuration.connections = Self.connections ?? 2
        configuration.missesAllowed = setup.missesAllowed
        if let seconds = Self.seconds {
            configuration.batches = .max
            configuration.seconds = seconds
            configuration.progress = { report in print("[\(setup.name)] connection 0: \(report)") }
        } else {
            configuration.batches = 400
        }
        do {
            let report = try PipelinedMix.run(port: node.port, configuration)
            #expect(report.hits > 0 && report.putsStored > 0)
            if Self.seconds != nil { print("[\(setup.name)] all connections: \(report)") }
        } catch {
            Issue.record("\(setup.name): \(error)")
        }
        // The node is still whole: it answers a fresh connection.
        #expect(try node.connect().roundTrip(.ping).status == .ok)
    }
}
