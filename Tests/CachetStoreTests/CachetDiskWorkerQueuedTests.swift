import CachetLocking
import CachetTestSupport
import Dispatch
import Foundation
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

    /// A range of a key with a write queued waits behind it and reads the new value; a range of a key with
    /// nothing queued is read beside the held queue at once.
    @Test func aRangeWaitsOnlyForItsOwnKeysQueuedWrites() throws {
        let directory = TemporaryDirectory()
        let worker = CachetDiskWorker(store: try openStore(directory))
        let old = noise(2 << 20, seed: 1)
        let new = noise(2 << 20, seed: 2)
        let other = noise(3 << 20, seed: 3)
        worker.store.put(key: [7], value: old, expiry: 0)
        worker.store.put(key: [8], value: other, expiry: 0)
        let gate = Self.holdQueue(worker)
        defer { gate.signal() }
        [7].withUnsafeBytes { worker.beginWrite(key: $0) }
        #expect(worker.submitPut(key: [7], value: new, expiry: 0).isQueued)

        let ranges = CachetLock<[UInt8: CachetDiskRange]>([:])
        let done = DispatchSemaphore(value: 0)
        for key: UInt8 in [7, 8] {
            worker.getRange(key: [key], offset: 1_000_000, length: 300_000, limit: .max, now: 1) { read in
                ranges.withLock { $0[key] = read }
                done.signal()
            }
        }
        // The other key's range comes back while the queue is held; the written key's does not.
        #expect(done.wait(timeout: .now() + 10) == .success)
        Thread.sleep(forTimeInterval: 0.2)
        let early = ranges.withLock { $0 }
        #expect(early.keys.sorted() == [8])
        guard case .bytes(_, _, _, let bytes) = early[8] else {
            Issue.record("no range of the other key: \(String(describing: early[8]))")
            return
        }
        #expect((bytes == Array(other[1_000_000..<1_300_000])) == true)
        gate.signal()
        #expect(done.wait(timeout: .now() + 10) == .success)
        guard case .bytes(let total, _, _, let written) = ranges.withLock({ $0[7] }) else {
            Issue.record("no range of the written key")
            return
        }
        #expect(total == new.count)
        #expect(
            (written == Array(new[1_000_000..<1_300_000])) == true,
            "the range read the value before the queued write"
        )
    }
}
