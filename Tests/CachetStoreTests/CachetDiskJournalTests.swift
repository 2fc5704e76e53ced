import CachetLocking
import CachetTestSupport
import Dispatch
import Foundation
import Testing

@testable import CachetStore

#if canImport(Glibc)
import Glibc
#endif

private func openJournaled(_ directory: TemporaryDirectory, journalCapacity: Int = 1024) throws -> CachetDiskStore {
    var configuration = CachetDiskConfiguration(directory: directory.path, limit: 1 << 30)
    configuration.journalCapacity = journalCapacity
    return try CachetDiskStore(configuration: configuration, logger: quietLogger())
}

private func key(_ i: Int) -> [UInt8] { Array("key-\(i)".utf8) }

/// The fan-out directory holding `key`'s entry file.
private func entryDirectory(_ store: CachetDiskStore, _ key: [UInt8]) -> String {
    store.path(for: key.withUnsafeBytes { KeyDigest(of: $0) }).directory
}

/// Makes a directory refuse new, renamed and deleted names: chmod 0555, or for root (which permission
/// bits do not stop) the immutable attribute. Returns an undo, or nil when neither works here.
private func makeReadOnly(_ path: String) -> (() -> Void)? {
    guard geteuid() == 0 else {
        chmod(path, 0o555)
        return { chmod(path, 0o755) }
    }
    func chattr(_ flag: String) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/chattr")
        process.arguments = [flag, path]
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chattr"), chattr("+i") else { return nil }
    return { _ = chattr("-i") }
}

@Suite("Disk journal", .dedicatedThreads)
struct CachetDiskJournalTests {
    @Test func aJournaledWriteOrDeleteTheQueueNeverAppliedIsAMissAfterACrash() throws {
        let directory = TemporaryDirectory()
        do {
            let store = try openJournaled(directory)
            for i in 0..<4 { store.put(key: key(i), value: [UInt8(i)], expiry: 0) }
            let worker = CachetDiskWorker(store: store)
            // Hold the queue, as a slow disk would, so that nothing submitted now is applied.
            let gate = DispatchSemaphore(value: 0)
            worker.get(key: [0], now: 1) { _ in gate.wait() }
            #expect(worker.submitPut(key: key(0), value: [9, 9], expiry: 0).isQueued)
            #expect(worker.submitRemove(key: key(1)).isQueued)
            store.abandonAsIfKilled()
            gate.signal()
            worker.drain()
        }
        #expect(entryFiles(directory).count == 4, "the old files are still there before the restart")
        let store = try openJournaled(directory)
        #expect(store.get(key: key(0), now: 1) == nil, "an older value came back")
        #expect(store.get(key: key(1), now: 1) == nil, "a deleted key came back")
        #expect(store.get(key: key(2), now: 1)?.value == [2])
        #expect(store.get(key: key(3), now: 1)?.value == [3])
        #expect(entryFiles(directory).count == 2)
        #expect(store.statistics.journalRecords == 0, "the replay was checkpointed away")
    }

    @Test func appliedOperationsAreCheckpointedAway() throws {
        let directory = TemporaryDirectory()
        let keys = 200
        do {
            let store = try openJournaled(directory, journalCapacity: 16)
            let worker = CachetDiskWorker(store: store)
            for i in 0..<keys {
                #expect(worker.submitPut(key: key(i), value: [UInt8(i % 256)], expiry: 0).isQueued)
                if i % 4 == 3 { worker.drain() }
            }
            worker.drain()
            let statistics = store.statistics
            #expect(statistics.journalCheckpoints > 10)
            #expect(statistics.journalRecords <= 16)
            store.abandonAsIfKilled()
        }
        let store = try openJournaled(directory, journalCapacity: 16)
        // Only what the last checkpoint had not dropped yet is invalidated.
        let kept = (0..<keys).filter { store.get(key: key($0), now: 1)?.value == [UInt8($0 % 256)] }.count
        #expect(kept >= keys - 16)
    }

    @Test func aCleanShutdownLeavesNothingToReplay() throws {
        let directory = TemporaryDirectory()
        do {
            let store = try openJournaled(directory)
            let worker = CachetDiskWorker(store: store)
            for i in 0..<10 { #expect(worker.submitPut(key: key(i), value: [1], expiry: 0).isQueued) }
            worker.drain()
            store.close()
        }
        let store = try openJournaled(directory)
        for i in 0..<10 { #expect(store.get(key: key(i), now: 1)?.value == [1]) }
        #expect(store.statistics.indexLoadedFromFile)
    }

    @Test func aJournalFullOfUndeletableStaleFilesRefusesWrites() throws {
        let directory = TemporaryDirectory()
        let store = try openJournaled(directory, journalCapacity: 16)
        let worker = CachetDiskWorker(store: store)
        // A directory where each key's entry file goes: the write fails and the "file" cannot be deleted,
        // as in a directory turned read-only.
        for i in 0..<40 {
            let path = store.path(for: key(i).withUnsafeBytes { KeyDigest(of: $0) })
            try FileManager.default.createDirectory(atPath: path.file + "/blocker", withIntermediateDirectories: true)
        }
        var refusedAt: Int?
        for i in 0..<40 {
            let admission = worker.submitPut(key: key(i), value: [1], expiry: 0)
            worker.drain()
            if case .refused(let error) = admission {
                #expect(error.code == .writeRefused)
                #expect(error.message.contains("stale entry files cannot be deleted"))
                refusedAt = i
                break
            }
        }
        #expect(refusedAt == 16, "16 undeletable keys fill a journal of 16 records")
        #expect(store.statistics.staleFiles == 16)
        #expect(store.statistics.refused == 1)
        #expect(!worker.submitRemove(key: key(0)).isQueued)
        // Once a stale file can be deleted, the journal has room again.
        for i in 0..<40 {
            let path = store.path(for: key(i).withUnsafeBytes { KeyDigest(of: $0) })
            try FileManager.default.removeItem(atPath: path.file)
        }
        _ = store.clear()
        #expect(store.statistics.staleFiles == 0)
        #expect(worker.submitPut(key: key(1), value: [2], expiry: 0).isQueued)
        worker.drain()
        #expect(store.get(key: key(1), now: 1)?.value == [2])
    }

    @Test func aWriteThatFailsInADirectoryTurnedReadOnlyNeverServesTheOldFile() throws {
        let directory = TemporaryDirectory()
        let target = key(7)
        var restore: (() -> Void)?
        defer { restore?() }
        do {
            let store = try openJournaled(directory)
            store.put(key: target, value: [1], expiry: 0)
            store.put(key: key(8), value: [8], expiry: 0)
            // A crash: no index file, so the next start rebuilds the index and reads unindexed keys' files.
            store.abandonAsIfKilled()
        }
        let store = try openJournaled(directory)
        #expect(store.isRecovering)
        guard let undo = makeReadOnly(entryDirectory(store, target)) else {
            print("skipped: running as root without chattr, a directory cannot be made read-only")
            return
        }
        restore = undo
        let worker = CachetDiskWorker(store: store)
        #expect(worker.submitPut(key: target, value: [2], expiry: 0).isQueued)
        worker.drain()
        #expect(store.statistics.staleFiles == 1)
        #expect(store.get(key: target, now: 1) == nil, "the old file was served while the index is rebuilt")
        #expect(!target.withUnsafeBytes { store.contains(key: $0, now: 1) })
        store.startRecovery()
        store.waitForRecovery()
        #expect(store.get(key: target, now: 1) == nil, "the rebuilt index serves the old file")
        #expect(store.get(key: key(8), now: 1)?.value == [8])
        // A clean shutdown while still read-only keeps it in the journal; a start while still read-only too.
        store.close()
        do {
            let reopened = try openJournaled(directory)
            #expect(reopened.statistics.staleFiles == 1)
            #expect(reopened.get(key: target, now: 1) == nil)
            reopened.startRecovery()
            reopened.waitForRecovery()
            #expect(reopened.get(key: target, now: 1) == nil)
            reopened.abandonAsIfKilled()
        }
        undo()
        restore = nil
        let writable = try openJournaled(directory)
        #expect(writable.statistics.staleFiles == 0)
        #expect(writable.get(key: target, now: 1) == nil)
        #expect(writable.get(key: key(8), now: 1)?.value == [8])
    }

    @Test func aClearThatCannotDeleteEveryFileIsReplayed() throws {
        let directory = TemporaryDirectory()
        var restore: (() -> Void)?
        defer { restore?() }
        do {
            let store = try openJournaled(directory)
            for i in 0..<3 { store.put(key: key(i), value: [UInt8(i)], expiry: 0) }
            guard let undo = makeReadOnly(entryDirectory(store, key(0))) else {
                print("skipped: running as root without chattr, a directory cannot be made read-only")
                return
            }
            restore = undo
            let worker = CachetDiskWorker(store: store)
            let done = DispatchSemaphore(value: 0)
            let result = CachetLock<CachetDiskClearResult?>(nil)
            worker.removeAll { cleared in
                result.withLock { $0 = cleared }
                done.signal()
            }
            #expect(done.wait(timeout: .now() + 10) == .success)
            #expect(result.withLock { $0?.failure } == nil, "the journal recorded the CLEAR, so it may be acknowledged")
            #expect(result.withLock { $0?.items } == 3)
            #expect(store.get(key: key(0), now: 1) == nil)
            store.abandonAsIfKilled()
        }
        #expect(entryFiles(directory).count == 1, "one file could not be deleted")
        restore?()
        restore = nil
        let store = try openJournaled(directory)
        #expect(entryFiles(directory).isEmpty)
        for i in 0..<3 { #expect(store.get(key: key(i), now: 1) == nil) }
    }

    @Test(.enabled(if: getuid() == 0, "mounting a small tmpfs needs root"))
    func theJournalKeepsWorkingOnAFullDisk() throws {
        let directory = TemporaryDirectory()
        guard CachetDiskStoreTests.mountTinyFilesystem(at: directory.path) else { return }
        defer { umount2(directory.path, Int32(MNT_DETACH)) }
        do {
            var configuration = CachetDiskConfiguration(directory: directory.path, limit: 1 << 30, compressionLevel: 0)
            configuration.journalCapacity = 64
            let store = try CachetDiskStore(configuration: configuration, logger: quietLogger())
            let worker = CachetDiskWorker(store: store)
            store.put(key: Array("old".utf8), value: noise(1000), expiry: 0)
            var i = 0
            while store.statistics.errors == 0 && i < 1000 {
                store.put(key: key(i), value: noise(20_000, seed: UInt64(i)), expiry: 0)
                i += 1
            }
            #expect(store.statistics.errors >= 1, "the disk never filled")
            // Overwrites are journaled on the full disk; the queue is held so none is applied.
            let gate = DispatchSemaphore(value: 0)
            worker.get(key: [0], now: 1) { _ in gate.wait() }
            #expect(worker.submitPut(key: Array("old".utf8), value: noise(500, seed: 5), expiry: 0).isQueued)
            store.abandonAsIfKilled()
            gate.signal()
            worker.drain()
        }
        let store = try openJournaled(directory, journalCapacity: 64)
        #expect(store.get(key: Array("old".utf8), now: 1) == nil, "the old value came back")
    }

    @Test func aReadQueuedBeforeAWriteMayNotStayPromoted() throws {
        let directory = TemporaryDirectory()
        let store = try openJournaled(directory)
        let worker = CachetDiskWorker(store: store)
        store.put(key: key(1), value: [1], expiry: 0)
        func read() -> CachetDiskEntry? {
            let done = DispatchSemaphore(value: 0)
            let result = CachetLock<CachetDiskEntry?>(nil)
            worker.get(key: key(1), now: 1) { entry in
                result.withLock { $0 = entry }
                done.signal()
            }
            _ = done.wait(timeout: .now() + 10)
            return result.withLock { $0 }
        }
        let quiet = try #require(read())
        #expect(key(1).withUnsafeBytes { worker.mayKeepPromotion(key: $0, of: quiet) })
        // A PUT begins (memory changes) after the read was queued: the read's value must not stay.
        key(1).withUnsafeBytes { worker.beginWrite(key: $0) }
        #expect(!key(1).withUnsafeBytes { worker.mayKeepPromotion(key: $0, of: quiet) }, "write in flight")
        #expect(worker.submitPut(key: key(1), value: [2], expiry: 0).isQueued)
        #expect(!key(1).withUnsafeBytes { worker.mayKeepPromotion(key: $0, of: quiet) }, "write after the read")
        // A read queued after the write was submitted sees it, and may stay.
        let later = try #require(read())
        #expect(later.value == [2])
        #expect(key(1).withUnsafeBytes { worker.mayKeepPromotion(key: $0, of: later) })
        // Other keys are not affected (unless they share a bucket, which only costs a miss).
        key(2).withUnsafeBytes { worker.beginWrite(key: $0) }
        #expect(key(1).withUnsafeBytes { worker.mayKeepPromotion(key: $0, of: later) })
        _ = worker.submitRemove(key: key(2))
        // A CLEAR invalidates every read queued before it.
        worker.beginClear()
        #expect(!key(1).withUnsafeBytes { worker.mayKeepPromotion(key: $0, of: later) })
        let cleared = DispatchSemaphore(value: 0)
        worker.removeAll { _ in cleared.signal() }
        #expect(cleared.wait(timeout: .now() + 10) == .success)
        #expect(!key(1).withUnsafeBytes { worker.mayKeepPromotion(key: $0, of: later) })
    }
}
