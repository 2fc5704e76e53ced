import CachetClient
import CachetTestSupport
import Foundation
import Testing

/// Values of any size through ``CachetClient``: stored from a file or any sequence of chunks in parts, read
/// back as a stream of ranges or into a file, byte-exact; a source that ends early stores nothing; a value
/// replaced while it is streamed fails the stream rather than mixing two values.
@Suite("CachetClient: values streamed in parts and ranges")
struct ClientStreamingTests {
    static func value(_ count: Int, seed: Int) -> [UInt8] {
        PatternBytes.make(count: count, step: 97, seed: seed)
    }

    static func startNode(_ directory: TemporaryDirectory) async throws -> NodeCluster {
        try await NodeCluster.start(
            count: 1,
            arguments: ["--memory-limit", "16MiB", "--data-dir", directory.path, "--disk-limit", "256MiB"]
        )
    }

    /// The chunks of `bytes`, of sizes cycling through `sizes`.
    static func chunks(_ bytes: [UInt8], sizes: [Int]) -> AsyncStream<[UInt8]> {
        AsyncStream { continuation in
            var offset = 0
            var index = 0
            while offset < bytes.count {
                let end = min(bytes.count, offset + sizes[index % sizes.count])
                continuation.yield(Array(bytes[offset..<end]))
                offset = end
                index += 1
            }
            continuation.finish()
        }
    }

    @Test func aFileIsStoredInPartsAndReadBackAsAStreamAndIntoAFile() async throws {
        let directory = TemporaryDirectory(prefix: "cachet-client-stream")
        defer { directory.remove() }
        let node = try await Self.startNode(directory)
        let value = Self.value(6_000_000 + 321, seed: 1)
        let source = URL(fileURLWithPath: directory.appending("source.bin"))
        try Data(value).write(to: source)
        try await withClient(node.configuration()) { client in
            let reports = LockedReports()
            try await client.put("video:42", contentsOf: source, ttl: .seconds(3600)) { reports.add($0, $1) }
            #expect(reports.last == value.count && reports.total == value.count && reports.count >= 6)
            var read: [UInt8] = []
            var chunks = 0
            for try await chunk in client.stream("video:42", partSize: 1_000_000) {
                read += chunk
                chunks += 1
            }
            #expect(read.count == value.count && read == value)
            #expect(chunks == 7)
            let copy = URL(fileURLWithPath: directory.appending("copy.bin"))
            let written = try await client.get("video:42", into: copy)
            #expect(written == value.count)
            #expect(try Data(contentsOf: copy) == Data(value))
            #expect(try await client.get("absent", into: copy.appendingPathExtension("no")) == nil)
            #expect(!FileManager.default.fileExists(atPath: copy.path + ".no"))
            let stats = try await client.stats()
            #expect(stats.first?[integer: "uploads_completed"] == 1)
        }
    }

    @Test func anySequenceOfChunksIsStoredAndASmallValueGoesInOnePut() async throws {
        let directory = TemporaryDirectory(prefix: "cachet-client-chunks")
        defer { directory.remove() }
        let node = try await Self.startNode(directory)
        try await withClient(node.configuration()) { client in
            let value = Self.value(2_500_000, seed: 2)
            try await client.put(
                "k",
                from: Self.chunks(value, sizes: [1, 77_777, 300_000, 5]),
                length: value.count,
                partSize: 65_536
            )
            var read: [UInt8] = []
            for try await chunk in client.stream("k", partSize: 100_000) { read += chunk }
            #expect(read == value)
            // A length that is a whole number of parts: the last full part ends the upload.
            let whole = Self.value(4 * 65_536, seed: 9)
            try await client.put(
                "parts",
                from: Self.chunks(whole, sizes: [65_536]),
                length: whole.count,
                partSize: 65_536
            )
            var back: [UInt8] = []
            for try await chunk in client.stream("parts") { back += chunk }
            #expect(back == whole)
            let small = Self.value(1000, seed: 3)
            try await client.put("small", from: Self.chunks(small, sizes: [10]), length: small.count)
            #expect(try await client.get("small") == small)
            var empty: [[UInt8]] = []
            try await client.put("empty", from: Self.chunks([], sizes: [1]), length: 0)
            for try await chunk in client.stream("empty") { empty.append(chunk) }
            #expect(empty.isEmpty)
            #expect(try await client.get("empty") == [])
        }
    }

    @Test func getTakesAValueLongerThanAFrameInSeveralFrames() async throws {
        let directory = TemporaryDirectory(prefix: "cachet-client-frames")
        defer { directory.remove() }
        let node = try await NodeCluster.start(
            count: 1,
            arguments: [
                "--memory-limit", "2MiB", "--data-dir", directory.path, "--disk-limit", "64MiB", "--max-frame", "1MiB",
            ]
        )
        var configuration = node.configuration()
        configuration.maximumFrameLength = 1 << 20
        try await withClient(configuration) { client in
            let value = Self.value(3_000_001, seed: 8)
            try await client.put("big", from: Self.chunks(value, sizes: [400_000]), length: value.count)
            // Read whole by a plain get (the node sends it in frames of at most 1 MiB), with its TTL, and
            // beside short requests on the same connections.
            async let big = client.get("big")
            async let short: Void = {
                for index in 0..<50 { try await client.put("s\(index)", value: [UInt8(index)]) }
            }()
            let read = try await big
            try await short
            #expect((read == value) == true)
            let withTTL = try await client.getWithTTL("big")
            #expect((withTTL?.value == value) == true && withTTL?.ttl == nil)
            #expect(try await client.get("s49") == [49])
        }
    }

    @Test func aSourceThatEndsEarlyOrRunsOverStoresNothing() async throws {
        let directory = TemporaryDirectory(prefix: "cachet-client-short")
        defer { directory.remove() }
        let node = try await Self.startNode(directory)
        try await withClient(node.configuration()) { client in
            try await client.put("k", value: Array("older".utf8))
            let value = Self.value(3_000_000, seed: 4)
            for (source, length) in [(Array(value[0..<2_000_000]), value.count), (value, 2_500_000)] {
                do {
                    try await client.put("k", from: Self.chunks(source, sizes: [500_000]), length: length)
                    Issue.record("a source of \(source.count) bytes for \(length) was stored")
                } catch let error as CachetClientError {
                    #expect(error.code == .badRequest && error.message.contains("nothing was stored"), "\(error)")
                }
                #expect(try await client.getString("k") == "older")
            }
        }
    }

    @Test func aStreamOfAMissingKeyOrAValueReplacedMidwayFails() async throws {
        let directory = TemporaryDirectory(prefix: "cachet-client-changed")
        defer { directory.remove() }
        let node = try await Self.startNode(directory)
        try await withClient(node.configuration()) { client in
            do {
                for try await _ in client.stream("absent") { Issue.record("a missing key yielded bytes") }
                Issue.record("a missing key streamed")
            } catch let error as CachetClientError {
                #expect(error.code == .notFound)
            }
            let first = Self.value(3_000_000, seed: 5)
            let second = Self.value(3_000_000, seed: 6)
            try await client.put("k", from: Self.chunks(first, sizes: [1 << 20]), length: first.count)
            var iterator = client.stream("k", partSize: 1 << 20).makeAsyncIterator()
            let head = try await iterator.next()
            #expect(head.map { Array(first[0..<(1 << 20)]) == $0 } == true)
            try await client.put("k", from: Self.chunks(second, sizes: [1 << 20]), length: second.count)
            // The range read ahead before the write may still come (it is of the first value); the first range
            // read after it is of the second, and ends the stream.
            var read = head ?? []
            do {
                while let chunk = try await iterator.next() { read += chunk }
                Issue.record("the stream ended without noticing the value was replaced")
            } catch let error as CachetClientError {
                #expect(error.code == .valueChanged, "\(error)")
            }
            #expect(read.count < first.count && read == Array(first[0..<read.count]), "never bytes of the second value")
        }
    }

    @Test func partsNeedANodeWithADiskTierAndSaySo() async throws {
        let node = try await NodeCluster.start(count: 1)
        try await withClient(node.configuration()) { client in
            let value = Self.value(3_000_000, seed: 7)
            do {
                try await client.put("k", from: Self.chunks(value, sizes: [1 << 20]), length: value.count)
                Issue.record("a node without a disk tier took parts")
            } catch let error as CachetClientError {
                #expect(error.code == .tooLarge && error.message.contains("disk tier"), "\(error)")
            }
        }
    }
}

/// Progress reports, taken from the upload's callback.
final class LockedReports: @unchecked Sendable {
    private let lock = NSLock()
    private var reports: [(Int, Int)] = []
    func add(_ sent: Int, _ total: Int) { lock.withLock { reports.append((sent, total)) } }
    var count: Int { lock.withLock { reports.count } }
    var last: Int? { lock.withLock { reports.last?.0 } }
    var total: Int? { lock.withLock { reports.last?.1 } }
}
