import CachetIO
import CachetStore
import CachetTestSupport
import CachetWire
import Testing

@testable import CachetNode

/// Drives the request processor with bytes alone: no sockets, no queues.
struct ProcessorHarness: ~Copyable {
    let processor: RequestProcessor
    var input = CachetByteBuffer(capacity: 64)
    var output = CachetByteBuffer(capacity: 64)
    /// The requests answered so far, by command.
    var tally = RequestTally()

    init(maximumPayloadLength: Int = 1 << 20, memoryLimit: Int = 8 << 20) {
        let store = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: memoryLimit))
        processor = RequestProcessor(
            store: store,
            disk: nil,
            counters: RequestCounters(),
            maximumPayloadLength: maximumPayloadLength,
            statistics: { _ in "{}" },
            connectionMemory: ConnectionMemory(limit: memoryLimit / 4)
        )
    }

    mutating func feed(_ bytes: [UInt8], outputLimit: Int = 1 << 30, requestLimit: Int = .max) -> ProcessingResult {
        input.append(bytes)
        var open = ConnectionAccess.open
        return processor.process(
            input: &input,
            output: &output,
            outputLimit: outputLimit,
            now: 1_000,
            access: &open,
            tally: &tally,
            requestLimit: requestLimit
        )
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
    @Test func yieldsAfterItsRequestLimitWithTheNextFrameLeftWhole() throws {
        var harness = ProcessorHarness()
        var stream: [UInt8] = []
        for id in 1...5 { CachetCommand.ping.encode(id: UInt32(id), to: &stream) }
        let first = harness.feed(stream, requestLimit: 2)
        guard case .yielded = first else {
            Issue.record("expected yielded, got \(first)")
            return
        }
        #expect(try harness.takeReplies().map(\.id) == [1, 2])
        #expect(harness.input.readableBytes == 3 * CachetProtocol.frameOverhead)
        // The last frames: all answered, nothing left to yield for.
        let rest = harness.feed([], requestLimit: 3)
        guard case .needMoreBytes(frameLength: 0) = rest else {
            Issue.record("expected needMoreBytes, got \(rest)")
            return
        }
        #expect(try harness.takeReplies().map(\.id) == [3, 4, 5])
    }

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

    @Test func aLargePutIsReceivedInPlaceAndStoredOnlyWhenComplete() throws {
        var harness = ProcessorHarness(maximumPayloadLength: 4 << 20)
        let old = CachetCommand.put(key: Array("k".utf8), value: [1, 2, 3], ttl: 0).encoded(id: 1)
        let value = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let put = CachetCommand.put(key: Array("k".utf8), value: value, ttl: 0).encoded(id: 2)
        let get = CachetCommand.get(key: Array("k".utf8)).encoded(id: 3)
        // The old PUT, then the start of the large one: its header, key and 1,000 value bytes.
        let head = 4 + 8 + 6 + 1 + 1_000
        guard case .receivingValue(let direct) = harness.feed(old + Array(put.prefix(head))) else {
            Issue.record("expected the large PUT to be received in place")
            return
        }
        #expect(try harness.takeReplies() == [CachetResponse(opcode: .put, status: .ok, id: 1)])
        #expect(harness.input.readableBytes == 0)
        #expect(direct.received == 1_000 && direct.id == 2 && !direct.isComplete)
        // Until complete, readers see the old value.
        #expect(harness.processor.commands.store.value(forKey: Array("k".utf8)) == [1, 2, 3])
        let rest = Array(put.dropFirst(head))
        rest.withUnsafeBytes { direct.remaining.copyMemory(from: $0) }
        direct.received += rest.count
        #expect(direct.isComplete)
        harness.processor.completeDirectPut(direct, output: &harness.output, now: 1_000)
        _ = harness.feed(get)
        #expect(
            try harness.takeReplies() == [
                CachetResponse(opcode: .put, status: .ok, id: 2),
                CachetResponse(opcode: .get, status: .ok, id: 3, body: value),
            ]
        )
    }

    @Test func largeFramesThatCannotBeReceivedInPlaceTakeTheNormalPath() throws {
        // Larger than the memory tier: answered TOO_LARGE once whole, as before.
        var harness = ProcessorHarness(maximumPayloadLength: 4 << 20, memoryLimit: 1 << 20)
        let tooBig = CachetCommand.put(key: Array("k".utf8), value: [UInt8](repeating: 1, count: 2 << 20), ttl: 0)
            .encoded(id: 1)
        guard case .needMoreBytes = harness.feed(Array(tooBig.prefix(5_000))) else {
            Issue.record("expected needMoreBytes")
            return
        }
        _ = harness.feed(Array(tooBig.dropFirst(5_000)))
        #expect(try harness.takeReplies().map(\.status) == [.tooLarge])
        // An unsupported version: the error reply comes once the frame is whole.
        var versioned = CachetCommand.put(key: Array("k".utf8), value: [UInt8](repeating: 1, count: 100_000), ttl: 0)
            .encoded(id: 2)
        versioned[4] = 9
        guard case .needMoreBytes = harness.feed(Array(versioned.prefix(5_000))) else {
            Issue.record("expected needMoreBytes")
            return
        }
        _ = harness.feed(Array(versioned.dropFirst(5_000)))
        #expect(try harness.takeReplies().map(\.status) == [.unsupportedVersion])
        // An empty key.
        let emptyKey = CachetCommand.put(key: [], value: [UInt8](repeating: 1, count: 100_000), ttl: 0).encoded(id: 3)
        guard case .needMoreBytes = harness.feed(Array(emptyKey.prefix(5_000))) else {
            Issue.record("expected needMoreBytes")
            return
        }
        _ = harness.feed(Array(emptyKey.dropFirst(5_000)))
        #expect(try harness.takeReplies().map(\.status) == [.badRequest])
    }

    @Test func largePutsInFlightStayWithinABudget() throws {
        // The harness's connection budget is a quarter of the 8 MiB tier: 2 MiB of values may be arriving in
        // place at once.
        var harness = ProcessorHarness(maximumPayloadLength: 4 << 20, memoryLimit: 8 << 20)
        let first = CachetCommand.put(key: Array("a".utf8), value: [UInt8](repeating: 1, count: 1_500_000), ttl: 0)
            .encoded(id: 1)
        let second = CachetCommand.put(key: Array("b".utf8), value: [UInt8](repeating: 2, count: 1_000_000), ttl: 0)
            .encoded(id: 2)
        var otherInput = CachetByteBuffer(capacity: 64)
        var otherOutput = CachetByteBuffer(capacity: 64)
        do {
            guard case .receivingValue(let direct) = harness.feed(Array(first.prefix(2_000))) else {
                Issue.record("expected the first PUT to be received in place")
                return
            }
            #expect(harness.processor.connectionMemory.current == 1_500_000)
            otherInput.append(Array(second.prefix(2_000)))
            var open = ConnectionAccess.open
            var tally = RequestTally()
            let result = harness.processor.process(
                input: &otherInput,
                output: &otherOutput,
                outputLimit: .max,
                now: 1_000,
                access: &open,
                tally: &tally
            )
            guard case .needMoreBytes = result else {
                Issue.record("over the budget the second PUT must wait in the input buffer, got \(result)")
                return
            }
            #expect(direct.received == 2_000 - 19)
        }
        // The first PUT abandoned (its connection closed): its reservation is returned.
        #expect(harness.processor.connectionMemory.current == 0)
        otherInput.append(Array(second.dropFirst(2_000)))
        var open = ConnectionAccess.open
        var tally = RequestTally()
        _ = harness.processor.process(
            input: &otherInput,
            output: &otherOutput,
            outputLimit: .max,
            now: 1_000,
            access: &open,
            tally: &tally
        )
        #expect(harness.processor.commands.store.value(forKey: Array("b".utf8))?.count == 1_000_000)
        #expect(harness.processor.commands.store.value(forKey: Array("a".utf8)) == nil)
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
            case .memoryFull:
                Issue.record("no GET reply here is too large for the budget")
            case .suspended:
                Issue.record("a node without a disk tier never suspends")
            case .receivingValue:
                Issue.record("frames below 64 KiB are never received in place")
            case .yielded:
                Issue.record("the harness sets no request limit")
            }
        }
    }
}
