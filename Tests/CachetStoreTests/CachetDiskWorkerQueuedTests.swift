import CachetTestSupport
import Dispatch
import Testing

@testable import CachetStore

/// ``CachetDiskWorker/mayHold(key:now:)`` while operations wait on a disk queue held by a slow read.
@Suite("Disk worker: keys with operations queued", .dedicatedThreads)
struct CachetDiskWorkerQueuedTests {
    /// Holds the worker's queue until the returned semaphore is signalled (or 10 s pass).
    private static func holdQueue(_ worker: CachetDiskWorker) -> DispatchSemaphore {
        let gate = DispatchSemaphore(value: 0)
        worker.get(key: [0], now: 1) { _ in _ = gate.wait(timeout: .now() + 10) }
        return gate
    }

    private static func put(_ worker: CachetDiskWorker, _ key: [UInt8], expiry: UInt32 = 0) -> Bool {
        key.withUnsafeBytes { worker.beginWrite(key: $0) }
        return worker.submitPut(key: key, value: [1, 2, 3], expiry: expiry).isQueued
    }

    private static func remove(_ worker: CachetDiskWorker, _ key: [UInt8]) -> Bool {
        key.withUnsafeBytes { worker.beginWrite(key: $0) }
        return worker.submitRemove(key: key).isQueued
    }

    private static func mayHold(_ worker: CachetDiskWorker, _ key: [UInt8], now: UInt32 = 100) -> Bool {
        key.withUnsafeBytes { worker.mayHold(key: $0, now: now) }
    }

    private static func indexed(_ worker: CachetDiskWorker, _ key: [UInt8], now: UInt32 = 100) -> Bool {
        key.withUnsafeBytes { worker.store.contains(key: $0, now: now) }
    }

    @Test func theLatestQueuedOperationDecidesBeforeItIsApplied() throws {
        let directory = TemporaryDirectory()
        let worker = CachetDiskWorker(store: try openStore(directory))
        #expect(Self.put(worker, [5]))
        worker.drain()
        let gate = Self.holdQueue(worker)
        defer { gate.signal() }
        #expect(Self.put(worker, [1]))
        #expect(Self.put(worker, [2], expiry: 50))
        #expect(Self.remove(worker, [5]))
        #expect(Self.put(worker, [3]))
        #expect(Self.remove(worker, [3]))
        #expect(Self.remove(worker, [4]))
        #expect(Self.put(worker, [4]))
        // Not applied: the index still says otherwise for every one of them.
        #expect(!Self.indexed(worker, [1]) && Self.indexed(worker, [5]) && !Self.indexed(worker, [4]))
        #expect(Self.mayHold(worker, [1]))
        #expect(!Self.mayHold(worker, [2]))  // expired at 100
        #expect(Self.mayHold(worker, [2], now: 10))
        #expect(!Self.mayHold(worker, [5]))
        #expect(!Self.mayHold(worker, [3]))
        #expect(Self.mayHold(worker, [4]))
        #expect(!Self.mayHold(worker, [6]))
        gate.signal()
        worker.drain()
        // Applied: the same answers, now from the index.
        for key: UInt8 in 1...6 {
            #expect(Self.mayHold(worker, [key]) == Self.indexed(worker, [key]), "key \(key)")
        }
        #expect(Self.mayHold(worker, [1]) && Self.mayHold(worker, [4]) && !Self.mayHold(worker, [5]))
        // Applied operations no longer answer for the key: the index does.
        worker.store.remove(key: [1])
        #expect(!Self.mayHold(worker, [1]))
    }

    @Test func aQueuedClearHidesWhatCameBeforeIt() throws {
        let directory = TemporaryDirectory()
        let worker = CachetDiskWorker(store: try openStore(directory))
        #expect(Self.put(worker, [1]))
        worker.drain()
        let gate = Self.holdQueue(worker)
        defer { gate.signal() }
        #expect(Self.put(worker, [2]))
        worker.beginClear()
        let cleared = DispatchSemaphore(value: 0)
        worker.removeAll { _ in cleared.signal() }
        #expect(Self.put(worker, [3]))
        #expect(Self.indexed(worker, [1]))
        #expect(!Self.mayHold(worker, [1]))
        #expect(!Self.mayHold(worker, [2]))
        #expect(Self.mayHold(worker, [3]))
        gate.signal()
        #expect(cleared.wait(timeout: .now() + 10) == .success)
        worker.drain()
        #expect(!Self.mayHold(worker, [1]) && !Self.mayHold(worker, [2]) && Self.mayHold(worker, [3]))
        worker.store.remove(key: [3])
        #expect(!Self.mayHold(worker, [3]))
    }
}
