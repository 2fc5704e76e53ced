import CachetStore
import Logging
import Testing

@testable import CachetNode

/// How a connection's input grows and shrinks, without a socket: bytes are written into the buffer as a
/// read would write them.
@Suite("Connection: input buffers grow by what is needed and shrink back")
struct ConnectionBufferTests {
    /// A connection of a loop that is never started (so never registered: its buffers alone are used).
    func makeConnection(memory: ConnectionMemory) throws -> Connection {
        let store = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: 8 << 20))
        let processor = RequestProcessor(
            store: store,
            disk: nil,
            counters: RequestCounters(),
            maximumPayloadLength: 1 << 20,
            statistics: { _ in "{}" },
            connectionMemory: memory
        )
        let loop = try NodeIOQueue(
            index: 0,
            processor: processor,
            outputLimit: 4 << 20,
            memory: memory,
            lingerMilliseconds: 0,
            logger: Logger(label: "cachet.test"),
            onClose: {}
        )
        return Connection(owner: loop, memory: memory)
    }

    /// Writes `count` bytes into the input the way a read does, after asking for room.
    func arrive(_ connection: Connection, _ count: Int, frameLength: Int) -> Bool {
        var left = count
        while left > 0 {
            guard connection.prepareInput(frameLength: frameLength) else { return false }
            let n = min(left, connection.input.writableBytes)
            connection.input.moveWriteIndex(forwardBy: n)
            left -= n
        }
        return true
    }

    @Test func oneByteDripsDoNotGrowTheBufferAheadOfTheBytes() throws {
        let memory = ConnectionMemory(limit: 8 << 20)
        let connection = try makeConnection(memory: memory)
        let frameLength = 2 << 20
        for _ in 0..<20_000 { #expect(arrive(connection, 1, frameLength: frameLength)) }
        // 20,000 bytes held in a buffer that grew in steps no larger than itself (the old code doubled
        // on every read while the frame was incomplete).
        #expect(connection.input.readableBytes == 20_000)
        #expect(connection.input.capacity <= 2 * 20_000 + Connection.minimumReadRoom)
        // The whole frame is reserved in the budget once the input had to grow for it.
        #expect(connection.inputReserved == frameLength)
        #expect(memory.current == frameLength - Connection.initialBufferSize)
        #expect(connection.charged.total == memory.current)
    }

    @Test func aClaimedFrameBeyondTheBudgetWaitsWithoutAllocating() throws {
        let memory = ConnectionMemory(limit: 1 << 20)
        let connection = try makeConnection(memory: memory)
        let frameLength = 16 << 20
        #expect(!arrive(connection, 100_000, frameLength: frameLength))
        #expect(connection.input.capacity == Connection.initialBufferSize)
        #expect(memory.current == 0)
    }

    @Test func repliesQueuedUnderTheFairAllowanceLeaveAFrameItsRoom() throws {
        let frameLength = 1 << 20
        let memory = ConnectionMemory(limit: 4 << 20, largestFrame: frameLength)
        // Hundreds of clients that never read, each with its allowance of replies: more than the replies'
        // share in all (what the budget lets them queue whatever it says).
        for _ in 0..<200 { memory.charge(16 * 1024, for: .replies) }
        #expect(memory.current > memory.replyLimit)
        #expect(memory.replyRoom == 0)
        // Inputs of ordinary size, counted and never checked.
        for _ in 0..<100 { memory.charge(28 * 1024, for: .fairInput) }
        // The room kept for one frame of the largest size is still there.
        let connection = try makeConnection(memory: memory)
        #expect(arrive(connection, frameLength, frameLength: frameLength))
        #expect(connection.inputReserved == frameLength)
        // And then it is taken: a second frame waits.
        let second = try makeConnection(memory: memory)
        #expect(!arrive(second, 100_000, frameLength: frameLength))
    }

    @Test func theBufferShrinksBackOnceTheLargeFrameHasPassed() throws {
        let memory = ConnectionMemory(limit: 8 << 20)
        let connection = try makeConnection(memory: memory)
        let frameLength = 3 << 20
        #expect(arrive(connection, frameLength, frameLength: frameLength))
        #expect(connection.input.capacity >= frameLength)
        connection.trimBuffers(tight: false)
        #expect(memory.current >= frameLength - 2 * Connection.initialBufferSize)
        // The frame is consumed; the connection reads the next one.
        connection.input.moveReadIndex(forwardBy: frameLength)
        connection.phase = .reading(frameLength: 0)
        connection.trimBuffers(tight: false)
        #expect(connection.input.capacity == Connection.initialBufferSize)
        #expect(connection.inputReserved == 0)
        #expect(memory.current == 0)
    }
}
