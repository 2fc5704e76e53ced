import CachetStore
import CachetTestSupport
import CachetWire
import Testing

@testable import CachetNode

/// Drives the request processor with bytes alone: no sockets, no queues.
struct ProcessorHarness: ~Copyable {
    let processor: RequestProcessor
    var input = ByteBuffer(capacity: 64)
    var output = ByteBuffer(capacity: 64)

    init(maximumPayloadLength: Int = 1 << 20, memoryLimit: Int = 8 << 20) {
        let store = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: memoryLimit))
        processor = RequestProcessor(
            store: store,
            disk: nil,
            counters: RequestCounters(),
            maximumPayloadLength: maximumPayloadLength,
            statistics: { "{}" }
        )
    }

    mutating func feed(_ bytes: [UInt8], outputLimit: Int = 1 << 30) -> ProcessingResult {
        input.append(bytes)
        return processor.process(input: &input, output: &output, outputLimit: outputLimit, now: 1_000)
    }

    mutating func takeReplies() throws -> [CachetResponse] {
        var replies: [CachetResponse] = []
        let region = output.readableRegion
        var offset = 0
        while let (reply, end) = try CachetResponse.decode(from: region, at: offset) {
            replies.append(reply)
            offset = end
        }
        output.moveReadIndex(forwardBy: offset)
        return replies
    }
}

@Suite("Request processor (no I/O)")
struct RequestProcessorTests {
    @Test func answersEveryWholeFrameAndKeepsThePartialOne() throws {
        var harness = ProcessorHarness()
        let put = CachetCommand.put(key: Array("k".utf8), value: Array("v".utf8), ttl: 0).encoded(id: 1)
        let get = CachetCommand.get(key: Array("k".utf8)).encoded(id: 2)
        let stream = put + get
        // Feed all but the last 3 bytes: one reply, and the processor waits for the rest of the GET.
        let first = harness.feed(Array(stream.dropLast(3)))
        guard case .needMoreBytes(let frameLength) = first else {
            Issue.record("expected needMoreBytes, got \(first)")
            return
        }
        #expect(frameLength == get.count)
        #expect(try harness.takeReplies() == [CachetResponse(opcode: .put, status: .ok, id: 1)])
        _ = harness.feed(Array(stream.suffix(3)))
        #expect(try harness.takeReplies() == [CachetResponse(opcode: .get, status: .ok, id: 2, body: Array("v".utf8))])
        #expect(harness.input.readableBytes == 0)
    }

    @Test func byteAtATimeGivesTheSameReplies() throws {
        var harness = ProcessorHarness()
        var stream: [UInt8] = []
        for i in 0..<20 {
            CachetCommand.put(key: Array("key\(i)".utf8), value: Array(repeating: UInt8(i), count: i), ttl: 0).encode(
                id: UInt32(i),
                to: &stream
            )
            CachetCommand.get(key: Array("key\(i)".utf8)).encode(id: UInt32(100 + i), to: &stream)
        }
        for byte in stream { _ = harness.feed([byte]) }
        let replies = try harness.takeReplies()
        #expect(replies.count == 40)
        for i in 0..<20 {
            #expect(replies[2 * i] == CachetResponse(opcode: .put, status: .ok, id: UInt32(i)))
            #expect(
                replies[2 * i + 1]
                    == CachetResponse(
                        opcode: .get,
                        status: .ok,
                        id: UInt32(100 + i),
                        body: Array(repeating: UInt8(i), count: i)
                    )
            )
        }
    }

    @Test func stopsWhenTheOutputPassesItsLimit() throws {
        var harness = ProcessorHarness()
        _ = harness.feed(CachetCommand.put(key: [1], value: Array(repeating: 9, count: 1000), ttl: 0).encoded(id: 0))
        _ = try harness.takeReplies()
        var gets: [UInt8] = []
        for i in 0..<10 { CachetCommand.get(key: [1]).encode(id: UInt32(i), to: &gets) }
        let result = harness.feed(gets, outputLimit: 2500)
        guard case .outputFull = result else {
            Issue.record("expected outputFull, got \(result)")
            return
        }
        // Three replies of 1012 bytes pass 2500; the other seven wait in the input.
        #expect(try harness.takeReplies().map(\.id) == [0, 1, 2])
        #expect(harness.input.readableBytes == 7 * gets.count / 10)
    }

    @Test func framingErrorsAskToClose() throws {
        var harness = ProcessorHarness(maximumPayloadLength: 1024)
        let result = harness.feed([0, 0, 0x10, 0, 1, 2])
        guard case .closeAfterReply = result else {
            Issue.record("expected closeAfterReply, got \(result)")
            return
        }
        #expect(
            try harness.takeReplies() == [
                CachetResponse(
                    opcode: .none,
                    status: .tooLarge,
                    id: 0,
                    body: Array("frame of 4096 bytes exceeds --max-frame 1024".utf8)
                )
            ]
        )
    }

    @Test func ttlBecomesAnAbsoluteExpiry() {
        #expect(RequestProcessor.expiry(ttl: 0, now: 1_000) == 0)
        #expect(RequestProcessor.expiry(ttl: 60, now: 1_000) == 1_060)
        #expect(RequestProcessor.expiry(ttl: .max, now: 1_000) == .max)
    }
}

@Suite("Request processor: random bytes")
struct RequestProcessorFuzzTests {
    @Test(arguments: [1, 2, 3, 4])
    func randomInputNeverTrapsAndAlwaysAnswersOrAsksToClose(seed: UInt64) throws {
        var random = SplitMix64(state: seed)
        for _ in 0..<2_000 {
            var harness = ProcessorHarness(maximumPayloadLength: 4096)
            // Half the time a plausible header with a random length and opcode, otherwise pure noise.
            var bytes: [UInt8] = []
            if random.next() % 2 == 0 {
                let length = UInt32(random.next() % 64)
                bytes += withUnsafeBytes(of: length.bigEndian, Array.init)
                bytes += [UInt8(random.next() % 3), UInt8(random.next() % 9)]
            }
            bytes += (0..<Int(random.next() % 80)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let result = harness.feed(bytes)
            let replies = try harness.takeReplies()
            switch result {
            case .closeAfterReply:
                #expect(replies.last?.id == 0 && replies.last?.opcode == CachetOpcode.none)
            case .needMoreBytes, .outputFull:
                #expect(replies.allSatisfy { $0.version == 1 })
            case .suspended:
                Issue.record("a node without a disk tier never suspends")
            }
        }
    }
}
