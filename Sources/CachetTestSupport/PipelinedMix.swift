import CachetLocking
import CachetWire
import Dispatch
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A seeded, reproducible load of pipelined batches against a real node, as a client library drives it:
/// on each connection, batches of 1, 4 or 16 requests (PUT, GET, DEL) over a small key space, each batch
/// written in one go by a second thread while the connection's own thread reads the replies as they come.
///
/// Value sizes sit on both sides of every size the node treats differently (see ``thresholdSizes``), so a
/// run crosses in-place PUTs, direct sends, output-buffer growth, the per-connection limit of pending
/// replies and the fair allowance in every order. Every request must get its reply in order, and every
/// GET must return exactly the value its connection last wrote for the key (each connection has keys of
/// its own), or a miss where the node may have evicted it.
///
/// The same seed sends the same batches, so a failure names its seed and batch and replays.
public enum PipelinedMix {
    /// Value sizes on both sides of the node's thresholds: the 1 KiB budget check of GET replies, the
    /// 4 KiB initial buffers, the 8 KiB direct send, the 32 KiB fair allowance, the 64 KiB in-place PUT
    /// and retained input, the 256 KiB retained output, and values of 1 MiB whose replies pass the 4 MiB
    /// limit of pending replies four at a time; and the sizes the original report used.
    public static let thresholdSizes = [
        0, 24, 480, 1_000, 1_100, 4_000, 4_200, 4_800, 8_100, 8_300, 32_700, 32_800, 64_000, 65_500,
        65_600, 140_000, 262_000, 296_000, 1_048_576, 1_048_576, 1_048_576, 1_048_576,
    ]

    /// What to run.
    public struct Configuration: Sendable {
        /// The seed of connection 0; connection `i` uses `seed + i`.
        public var seed: UInt64
        /// Connections, each with its own thread pair and its own keys.
        public var connections = 1
        /// Batches per connection.
        public var batches = 200
        /// Stop starting batches after this many seconds (whatever ``batches`` says); nil: no limit.
        public var seconds: Double?
        /// Keys per connection.
        public var keys = 64
        /// The value sizes PUTs draw from, with equal weight.
        public var sizes = PipelinedMix.thresholdSizes
        /// Seconds a batch may go without a reply before the run fails as stalled.
        public var replyTimeout = 10.0
        /// Whether a GET may miss a key its connection wrote (the node may evict: a small memory limit).
        /// With false, such a miss fails the run.
        public var missesAllowed = true
        /// Called from connection 0 about every ``progressInterval`` seconds with the report so far.
        public var progress: (@Sendable (Report) -> Void)?
        /// Seconds between ``progress`` calls.
        public var progressInterval = 10.0

        /// - Parameter seed: the seed of connection 0.
        public init(seed: UInt64) { self.seed = seed }
    }

    /// What a run did.
    public struct Report: Sendable, CustomStringConvertible {
        /// Batches whose replies all arrived.
        public var batches = 0
        /// Requests answered.
        public var requests = 0
        /// PUTs answered OK.
        public var putsStored = 0
        /// PUTs answered TOO_LARGE (an entry larger than the node holds).
        public var putsRefused = 0
        /// GETs that returned a value (checked).
        public var hits = 0
        /// GETs that missed.
        public var misses = 0
        /// Bytes of requests sent.
        public var bytesSent = 0
        /// Bytes of values received.
        public var bytesReceived = 0

        mutating func add(_ other: Report) {
            batches += other.batches
            requests += other.requests
            putsStored += other.putsStored
            putsRefused += other.putsRefused
            hits += other.hits
            misses += other.misses
            bytesSent += other.bytesSent
            bytesReceived += other.bytesReceived
        }

        /// One line for a log.
        public var description: String {
            "\(batches) batches, \(requests) requests (\(putsStored) PUTs stored, \(putsRefused) refused, "
                + "\(hits) hits, \(misses) misses), \(bytesSent >> 20) MiB sent, \(bytesReceived >> 20) MiB of values received"
        }
    }

    /// Why a run failed: a batch whose replies stopped, a wrong reply or value, or a broken connection.
    public struct Failure: Error, CustomStringConvertible {
        /// The seed of the connection that failed (replays it with `connections = 1`).
        public var seed: UInt64
        /// The batch, counted from 0.
        public var batch: Int
        /// What went wrong.
        public var message: String

        /// The failure with its seed and batch.
        public var description: String { "seed \(seed), batch \(batch): \(message)" }
    }

    /// Runs the mix against the node at `port` on 127.0.0.1, one thread pair per connection, and waits for
    /// every connection to finish.
    /// - Parameters:
    ///   - port: the node's port.
    ///   - configuration: what to run.
    /// - Returns: the totals of every connection.
    /// - Throws: the first ``Failure`` of any connection, or a ``TestSocketError`` when one cannot connect.
    public static func run(port: Int, _ configuration: Configuration) throws -> Report {
        let results = CachetLock<[Result<Report, any Error>]>([])
        let group = DispatchGroup()
        for index in 0..<configuration.connections {
            group.enter()
            let thread = Thread {
                let result = Result { try runConnection(index: index, port: port, configuration) }
                results.withLock { $0.append(result) }
                group.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
        var total = Report()
        for result in results.withLock({ $0 }) { total.add(try result.get()) }
        return total
    }

    /// A request of a batch, with what its reply must be checked against.
    private enum Operation {
        case put(key: Int, value: [UInt8])
        case get(key: Int)
        case delete(key: Int)
    }

    private static func runConnection(index: Int, port: Int, _ configuration: Configuration) throws -> Report {
        let seed = configuration.seed &+ UInt64(index)
        var random = SplitMix64(state: seed)
        let socket = try TestSocket(port: port, timeout: configuration.replyTimeout)
        defer { socket.close() }
        // The writer: a batch is sent in one go from this queue while this thread reads its replies. It
        // touches only the socket's descriptor (`TestSocket.send`), the reader only its input buffer.
        let writer = DispatchQueue(label: "cachet.mix.writer.\(index)")
        let writeError = CachetLock<(any Error)?>(nil)
        let keys = (0..<configuration.keys).map { Array("mix-\(index)-\($0)".utf8) }
        // What the connection last wrote for each key and had acknowledged (nil: deleted, or never written).
        var model = [[UInt8]?](repeating: nil, count: configuration.keys)
        var report = Report()
        let start = DispatchTime.now()
        var lastProgress = start
        var nextID: UInt32 = 1
        for batch in 0..<configuration.batches {
            if let seconds = configuration.seconds,
                Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9 >= seconds
            {
                break
            }
            let count = [1, 4, 16][Int(random.next() % 3)]
            var operations: [Operation] = []
            var bytes: [UInt8] = []
            let firstID = nextID
            for _ in 0..<count {
                let key = Int(random.next() % UInt64(configuration.keys))
                let roll = random.next() % 100
                let operation: Operation
                let command: CachetCommand
                if roll < 35 {
                    let size = configuration.sizes[Int(random.next() % UInt64(configuration.sizes.count))]
                    let value = PatternBytes.make(
                        count: size,
                        step: Int(random.next() % 128) * 2 + 1,
                        seed: Int(random.next() % 256),
                        stampingEvery: 4096
                    )
                    operation = .put(key: key, value: value)
                    command = .put(key: keys[key], value: value, ttl: 0)
                } else if roll < 90 {
                    operation = .get(key: key)
                    command = .get(key: keys[key])
                } else {
                    operation = .delete(key: key)
                    command = .delete(key: keys[key])
                }
                command.encode(id: nextID, to: &bytes)
                nextID &+= 1
                operations.append(operation)
            }
            report.bytesSent += bytes.count
            writer.async { [bytes] in
                do { try socket.send(bytes) } catch { writeError.withLock { $0 = $0 ?? error } }
            }
            for (offset, operation) in operations.enumerated() {
                let id = firstID &+ UInt32(offset)
                let reply: CachetResponse
                do {
                    reply = try socket.readResponse()
                } catch {
                    let sent = writeError.withLock { $0 }.map { " (the write failed: \($0))" } ?? ""
                    throw Failure(
                        seed: seed,
                        batch: batch,
                        message: "\(offset) of \(operations.count) replies arrived, then \(error)\(sent); the batch: "
                            + describe(operations)
                    )
                }
                func fail(_ message: String) -> Failure {
                    Failure(
                        seed: seed,
                        batch: batch,
                        message: "request \(offset) of \(describe(operations)): \(message)"
                    )
                }
                guard reply.id == id else { throw fail("reply id \(reply.id), expected \(id)") }
                report.requests += 1
                switch operation {
                case .put(let key, let value):
                    switch reply.status {
                    case .ok:
                        model[key] = value
                        report.putsStored += 1
                    case .tooLarge:
                        // Refused: the earlier value stays.
                        report.putsRefused += 1
                    default:
                        throw fail("PUT answered \(reply.status): \(String(decoding: reply.body, as: UTF8.self))")
                    }
                case .get(let key):
                    switch reply.status {
                    case .ok:
                        guard let expected = model[key] else {
                            throw fail("GET returned \(reply.body.count) bytes for a key deleted or never written")
                        }
                        guard PatternBytes.equal(reply.body, expected) else {
                            throw fail(
                                "GET returned \(reply.body.count) bytes that are not the \(expected.count) last written"
                            )
                        }
                        report.hits += 1
                        report.bytesReceived += reply.body.count
                    case .notFound:
                        if model[key] != nil && !configuration.missesAllowed {
                            throw fail("GET missed a key written with \(model[key]!.count) bytes")
                        }
                        report.misses += 1
                    default:
                        throw fail("GET answered \(reply.status): \(String(decoding: reply.body, as: UTF8.self))")
                    }
                case .delete(let key):
                    guard reply.status == .ok || reply.status == .notFound else {
                        throw fail("DEL answered \(reply.status): \(String(decoding: reply.body, as: UTF8.self))")
                    }
                    model[key] = nil
                }
            }
            report.batches += 1
            if index == 0, let progress = configuration.progress {
                let now = DispatchTime.now()
                if Double(now.uptimeNanoseconds - lastProgress.uptimeNanoseconds) / 1e9
                    >= configuration.progressInterval
                {
                    lastProgress = now
                    progress(report)
                }
            }
        }
        writer.sync {}
        if let error = writeError.withLock({ $0 }) {
            throw Failure(seed: seed, batch: report.batches, message: "a write failed: \(error)")
        }
        return report
    }

    private static func describe(_ operations: [Operation]) -> String {
        "["
            + operations.map { operation in
                switch operation {
                case .put(let key, let value): return "PUT \(key) (\(value.count) B)"
                case .get(let key): return "GET \(key)"
                case .delete(let key): return "DEL \(key)"
                }
            }.joined(separator: ", ") + "]"
    }
}
