import CachetLocking
import Dispatch
import Foundation
import Testing

@Suite("CachetLock")
struct CachetLockTests {
    /// A value whose updates are not atomic: a read, a pause, a write. Without mutual exclusion, threads
    /// lose each other's increments and see another thread inside.
    struct Tally {
        var count = 0
        var inside = false
        var overlaps = 0
    }

    @Test func threadsUnderTheLockNeverOverlapAndLoseNoUpdate() {
        let lock = CachetLock(Tally())
        let threads = 8
        let rounds = 20_000
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for _ in 0..<rounds {
                lock.withLock { tally in
                    if tally.inside { tally.overlaps += 1 }
                    tally.inside = true
                    let seen = tally.count
                    for _ in 0..<3 { _ = Int.random(in: 0..<2) }
                    tally.count = seen + 1
                    tally.inside = false
                }
            }
        }
        let tally = lock.withLock { $0 }
        #expect(tally.overlaps == 0)
        #expect(tally.count == threads * rounds)
    }

    struct Refused: Error {}

    @Test func aThrowingBodyReleasesTheLockAndKeepsItsChanges() throws {
        let lock = CachetLock([Int]())
        #expect(throws: Refused.self) {
            try lock.withLock { (values: inout [Int]) throws(Refused) in
                values.append(1)
                throw Refused()
            }
        }
        // Taken again from another thread within a deadline: a lock left held would time out here
        // instead of hanging the test.
        let done = DispatchSemaphore(value: 0)
        let values = CachetLock([Int]())
        Thread.detachNewThreadWithLock(lock, into: values, signal: done)
        #expect(done.wait(timeout: .now() + 5) == .success, "the lock was still held after the body threw")
        #expect(values.withLock { $0 } == [1, 2])
    }

    @Test func resultsAndNonCopyableValuesPassThrough() {
        struct Token: ~Copyable { var uses = 0 }
        let lock = CachetLock(Token())
        let uses = lock.withLock { token in
            token.uses += 1
            return token.uses
        }
        #expect(uses == 1)
    }
}

extension Thread {
    /// Appends 2 under `lock` on a new thread, copies the result to `values` and signals `signal`.
    static func detachNewThreadWithLock(
        _ lock: CachetLock<[Int]>,
        into values: CachetLock<[Int]>,
        signal: DispatchSemaphore
    ) {
        Thread.detachNewThread {
            let copy = lock.withLock { array in
                array.append(2)
                return array
            }
            values.withLock { $0 = copy }
            signal.signal()
        }
    }
}
