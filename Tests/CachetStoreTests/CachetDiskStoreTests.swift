import CachetTestSupport
import Foundation
import Logging
import Testing

@testable import CachetStore

#if canImport(Glibc)
import Glibc
#endif

func quietLogger() -> Logger {
    var logger = Logger(label: "cachet.test.disk")
    logger.logLevel = .critical
    return logger
}

func openStore(
    _ directory: TemporaryDirectory,
    limit: Int = 1 << 30,
    level: Int32 = 1,
    capacity: Int = 1024,
    byteCapacity: Int = CachetDiskConfiguration.defaultQueueByteCapacity
) throws -> CachetDiskStore {
    var configuration = CachetDiskConfiguration(
        directory: directory.path,
        limit: limit,
        compressionLevel: level,
        queueCapacity: capacity
    )
    configuration.queueByteCapacity = byteCapacity
    return try CachetDiskStore(configuration: configuration, logger: quietLogger())
}

/// Compressible text: JSON-like records.
func jsonLike(_ count: Int) -> [UInt8] {
    var text = ""
    var i = 0
    while text.utf8.count < count {
        text += #"{"id":\#(i),"name":"user-\#(i)","active":true,"tags":["alpha","beta"]},"#
        i += 1
    }
    return Array(text.utf8.prefix(count))
}

/// Incompressible bytes.
func noise(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
    var random = SplitMix64(state: seed)
    return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
}

/// Every entry file below the directory.
func entryFiles(_ directory: TemporaryDirectory) -> [String] {
    let enumerator = FileManager.default.enumerator(atPath: directory.path)
    var files: [String] = []
    while let name = enumerator?.nextObject() as? String {
        let last = (name as NSString).lastPathComponent
        if last.utf8.count == 64 { files.append(directory.appending(name)) }
    }
    return files
}

@Suite("Disk tier")
struct CachetDiskStoreTests {
    @Test func compressibleAndIncompressibleValuesRoundTrip() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        let text = jsonLike(10_000)
        let random = noise(10_000)
        store.put(key: Array("text".utf8), value: text, expiry: 0)
        store.put(key: Array("random".utf8), value: random, expiry: 0)
        store.put(key: Array("empty".utf8), value: [], expiry: 0)
        #expect(store.get(key: Array("text".utf8), now: 1) == CachetDiskEntry(value: text, expiry: 0))
        #expect(store.get(key: Array("random".utf8), now: 1)?.value == random)
        #expect(store.get(key: Array("empty".utf8), now: 1)?.value == [])
        let statistics = store.statistics
        #expect(statistics.items == 3)
        #expect(statistics.compressedWrites == 1)
        #expect(statistics.rawWrites == 2)
        #expect(statistics.logicalBytes == 4 + 10_000 + 6 + 10_000 + 5)
        // The text shrank a lot; the noise was stored raw, so the files hold it plus headers.
        #expect(statistics.bytes < 10_000 + 10_000 / 3 + 3 * 100)
        #expect(statistics.bytes > 10_000)
        #expect(statistics.hits == 3)
    }

    @Test func filesAreNamedBySHA256AndFannedOut() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        store.put(key: Array("abc".utf8), value: [1], expiry: 0)
        // SHA-256("abc")
        let hex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        #expect(FileManager.default.fileExists(atPath: directory.appending("ba/78/\(hex)")))
    }

    @Test func theLimitHoldsAndLRUOrderDecides() throws {
        let directory = TemporaryDirectory()
        let value = noise(1000)
        let fileSize = DiskEntryFormat.headerSize + 3 + 1000
        // The limit counts each entry's record in the index file a clean shutdown writes (52 bytes).
        let store = try openStore(directory, limit: (fileSize + 52) * 5)
        for i in 0..<5 { store.put(key: Array("k\(i)x".utf8).prefix(3).map { $0 }, value: value, expiry: 0) }
        // Read k0 so that k1 is the least recently used.
        #expect(store.get(key: Array("k0x".utf8), now: 1) != nil)
        for i in 5..<8 { store.put(key: Array("k\(i)x".utf8), value: value, expiry: 0) }
        let statistics = store.statistics
        #expect(statistics.bytes <= fileSize * 5)
        #expect(statistics.items == 5)
        #expect(statistics.evictions == 3)
        #expect(store.get(key: Array("k0x".utf8), now: 1) != nil)
        for gone in ["k1x", "k2x", "k3x"] {
            #expect(store.get(key: Array(gone.utf8), now: 1) == nil, "\(gone) should be evicted")
        }
        #expect(entryFiles(directory).count == 5)
    }

    @Test func contentsSurviveAReopenViaTheIndexFile() throws {
        let directory = TemporaryDirectory()
        do {
            let store = try openStore(directory)
            for i in 0..<50 { store.put(key: Array("key\(i)".utf8), value: jsonLike(500 + i), expiry: 0) }
            store.close()
        }
        let reopened = try openStore(directory)
        #expect(reopened.statistics.indexLoadedFromFile)
        #expect(reopened.statistics.items == 50)
        for i in 0..<50 { #expect(reopened.get(key: Array("key\(i)".utf8), now: 1)?.value == jsonLike(500 + i)) }
    }

    @Test func anIndexFileThatDisagreesWithTheFilesIsNotTrusted() throws {
        let directory = TemporaryDirectory()
        do {
            let store = try openStore(directory)
            for i in 0..<10 { store.put(key: Array("key\(i)".utf8), value: noise(100, seed: UInt64(i)), expiry: 0) }
            store.close()
        }
        // Someone deleted an entry file while the node was down.
        let victim = try #require(entryFiles(directory).first)
        try FileManager.default.removeItem(atPath: victim)
        let store = try openStore(directory)
        #expect(!store.statistics.indexLoadedFromFile)
        store.startRecovery()
        store.waitForRecovery()
        #expect(store.statistics.items == 9)
    }

    @Test func withoutAnIndexFileTheFilesAreScanned() throws {
        let directory = TemporaryDirectory()
        do {
            let store = try openStore(directory)
            for i in 0..<30 {
                store.put(key: Array("key\(i)".utf8), value: noise(200, seed: UInt64(i)), expiry: i == 0 ? 5 : 0)
            }
            store.close()
        }
        // As after kill -9: no index file, and a half-written temporary file.
        try FileManager.default.removeItem(atPath: directory.appending("index"))
        try FileManager.default.createDirectory(atPath: directory.appending("ab/cd"), withIntermediateDirectories: true)
        _ = FileManager.default.createFile(
            atPath: directory.appending("ab/cd/" + String(repeating: "0", count: 64) + ".tmp"),
            contents: Data([1, 2])
        )
        let reopened = try openStore(directory)
        #expect(reopened.isRecovering)
        // Before the rebuild has even started, a key's file is read directly.
        #expect(reopened.get(key: Array("key3".utf8), now: CachetClock.now())?.value == noise(200, seed: 3))
        reopened.startRecovery()
        reopened.waitForRecovery()
        #expect(!reopened.isRecovering)
        let statistics = reopened.statistics
        #expect(!statistics.indexLoadedFromFile)
        #expect(statistics.items == 29)  // key0 had expired (expiry 5 is long past)
        #expect(reopened.get(key: Array("key7".utf8), now: CachetClock.now())?.value == noise(200, seed: 7))
        #expect(
            !FileManager.default.fileExists(
                atPath: directory.appending("ab/cd/" + String(repeating: "0", count: 64) + ".tmp")
            )
        )
    }

    @Test func operationsDuringRecoveryKeepTheirMeaning() throws {
        let directory = TemporaryDirectory()
        do {
            let store = try openStore(directory)
            for i in 0..<300 { store.put(key: Array("key\(i)".utf8), value: [UInt8(i % 256)], expiry: 0) }
            store.close()
        }
        try FileManager.default.removeItem(atPath: directory.appending("index"))
        let store = try openStore(directory)
        // Before the scan: a delete removes the file, a write replaces it, a read finds an unindexed file.
        #expect(store.contains(key: UnsafeRawBufferPointer(start: nil, count: 0), now: 1))
        #expect(store.remove(key: Array("key1".utf8)))
        store.put(key: Array("key2".utf8), value: [200, 200], expiry: 0)
        #expect(store.get(key: Array("key5".utf8), now: 1)?.value == [5])
        store.startRecovery()
        store.waitForRecovery()
        #expect(store.get(key: Array("key1".utf8), now: 1) == nil, "a deleted entry came back")
        #expect(store.get(key: Array("key2".utf8), now: 1)?.value == [200, 200], "the scan replaced a newer write")
        #expect(store.statistics.items == 299)
        // CLEAR before the scan removes files the index does not know yet.
        store.close()
        try FileManager.default.removeItem(atPath: directory.appending("index"))
        let again = try openStore(directory)
        let removed = again.removeAll()
        #expect(removed.items == 299)
        again.startRecovery()
        again.waitForRecovery()
        #expect(again.statistics.items == 0)
        #expect(entryFiles(directory).isEmpty)
    }

    @Test func loweringTheLimitTrimsAtStart() throws {
        let directory = TemporaryDirectory()
        do {
            let store = try openStore(directory)
            for i in 0..<20 { store.put(key: Array("key\(i)".utf8), value: noise(1000, seed: UInt64(i)), expiry: 0) }
            store.close()
        }
        let small = try openStore(directory, limit: 5 * (1040 + 52))
        let statistics = small.statistics
        #expect(statistics.bytes <= 5 * 1040)
        #expect(statistics.items == 5)
        // The most recently written survive.
        for i in 15..<20 { #expect(small.get(key: Array("key\(i)".utf8), now: 1) != nil) }
        #expect(entryFiles(directory).count == 5)
    }

    @Test func aFlippedByteIsAMissAndCountedCorrupt() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        store.put(key: Array("victim".utf8), value: jsonLike(2000), expiry: 0)
        let file = try #require(entryFiles(directory).first)
        var bytes = try #require(FileManager.default.contents(atPath: file))
        bytes[bytes.count - 10] ^= 0x40
        _ = FileManager.default.createFile(atPath: file, contents: bytes)
        #expect(store.get(key: Array("victim".utf8), now: 1) == nil)
        #expect(store.statistics.corrupt == 1)
        #expect(store.statistics.items == 0)
        #expect(!FileManager.default.fileExists(atPath: file))
    }

    @Test(arguments: [0, 5, 27, 40])
    func aTruncatedFileIsAMiss(keep: Int) throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        store.put(key: Array("cut".utf8), value: noise(100), expiry: 0)
        let file = try #require(entryFiles(directory).first)
        let bytes = try #require(FileManager.default.contents(atPath: file))
        _ = FileManager.default.createFile(atPath: file, contents: bytes.prefix(keep))
        #expect(store.get(key: Array("cut".utf8), now: 1) == nil)
        #expect(store.statistics.corrupt == 1)
    }

    @Test func aFileHoldingAnotherKeyIsAMiss() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        store.put(key: Array("one".utf8), value: [1], expiry: 0)
        store.put(key: Array("two".utf8), value: [2], expiry: 0)
        let files = entryFiles(directory)
        let one = try #require(
            files.first { FileManager.default.contents(atPath: $0)?.contains(Array("one".utf8)) == true }
        )
        let two = try #require(files.first { $0 != one })
        try FileManager.default.removeItem(atPath: two)
        try FileManager.default.copyItem(atPath: one, toPath: two)
        #expect(store.get(key: Array("two".utf8), now: 1) == nil)
        #expect(store.get(key: Array("one".utf8), now: 1)?.value == [1])
    }

    @Test func expiryIsHonouredAcrossAReopen() throws {
        let directory = TemporaryDirectory()
        let now = CachetClock.now()
        do {
            let store = try openStore(directory)
            store.put(key: Array("short".utf8), value: [1], expiry: now + 2)
            store.put(key: Array("long".utf8), value: [2], expiry: now + 3600)
            store.close()
        }
        let store = try openStore(directory)
        #expect(store.get(key: Array("short".utf8), now: now)?.expiry == now + 2)
        #expect(store.get(key: Array("short".utf8), now: now + 2) == nil)
        #expect(store.get(key: Array("long".utf8), now: now + 2)?.value == [2])
        #expect(!store.contains(key: UnsafeRawBufferPointer(start: nil, count: 0), now: now))
    }

    @Test func removeAllReportsItemsAndBytes() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        store.put(key: Array("a".utf8), value: Array("12345".utf8), expiry: 0)
        store.put(key: Array("bb".utf8), value: Array("678".utf8), expiry: 0)
        let removed = store.removeAll()
        #expect(removed.items == 2 && removed.bytes == 11)
        #expect(entryFiles(directory).isEmpty)
        #expect(store.statistics.items == 0)
    }

    @Test func aSecondOpenOfTheSameDirectoryIsRefused() throws {
        let directory = TemporaryDirectory()
        let first = try openStore(directory)
        do throws(CachetStoreError) {
            _ = try CachetDiskStore(
                configuration: CachetDiskConfiguration(directory: directory.path, limit: 1 << 20),
                logger: quietLogger()
            )
            Issue.record("the second open succeeded")
        } catch {
            #expect(error.code == .directoryLocked)
            #expect(error.message.contains("in use by another cachet-node (pid \(getpid())"))
        }
        first.close()
        #expect(throws: Never.self) { _ = try openStore(directory) }
    }

    @Test func aReadOnlyDirectoryServesWhatItHasAndCountsFailedWrites() throws {
        guard getuid() != 0 else {
            // root ignores permission bits; a read-only bind mount would be needed. Use a file as the
            // directory's parent instead, which no user can create a directory under.
            let directory = TemporaryDirectory()
            _ = FileManager.default.createFile(atPath: directory.appending("file"), contents: Data([1]))
            let store = try CachetDiskStore(
                configuration: CachetDiskConfiguration(directory: directory.appending("file/data"), limit: 1 << 20),
                logger: quietLogger()
            )
            store.put(key: [1], value: [1], expiry: 0)
            #expect(store.get(key: [1], now: 1) == nil)
            #expect(!store.statistics.writable)
            #expect(store.statistics.errors >= 1)
            return
        }
        let directory = TemporaryDirectory()
        chmod(directory.path, 0o555)
        defer { chmod(directory.path, 0o755) }
        let store = try openStore(directory)
        store.put(key: [1], value: [1], expiry: 0)
        #expect(!store.statistics.writable)
        #expect(store.statistics.errors >= 1)
    }

    @Test func largeMediaIsJudgedByASampleAndStoredRaw() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        let media = noise(200_000, seed: 3)
        let mixed = noise(40_000, seed: 4) + jsonLike(400_000)  // incompressible start, but text overall
        store.put(key: [1], value: media, expiry: 0)
        store.put(key: [2], value: mixed, expiry: 0)
        #expect(store.get(key: [1], now: 1)?.value == media)
        #expect(store.get(key: [2], now: 1)?.value == mixed)
        #expect(store.statistics.rawWrites == 2)  // the sample decides: a media-like head means raw
        #expect(store.statistics.bytes >= 600_000)
    }

    /// Mounts a 256 KiB tmpfs at `path`; false where mounting is not allowed (not root, or a sandbox).
    static func mountTinyFilesystem(at path: String) -> Bool {
        guard getuid() == 0 else { return false }
        return mount("tmpfs", path, "tmpfs", 0, "size=256k") == 0
    }

    @Test(.enabled(if: getuid() == 0, "mounting a small tmpfs needs root"))
    func aFullDiskIsCountedAndNothingStaleIsServed() throws {
        let directory = TemporaryDirectory()
        guard Self.mountTinyFilesystem(at: directory.path) else {
            // Without a small filesystem of our own, a full disk cannot be made safely.
            return
        }
        defer { umount2(directory.path, Int32(MNT_DETACH)) }
        let store = try openStore(directory, level: 0)
        store.put(key: Array("old".utf8), value: noise(1000), expiry: 0)
        #expect(store.get(key: Array("old".utf8), now: 1)?.value == noise(1000))
        // Fill the filesystem until writes fail.
        var i = 0
        while store.statistics.errors == 0 && i < 1000 {
            store.put(key: Array("fill\(i)".utf8), value: noise(20_000, seed: UInt64(i)), expiry: 0)
            i += 1
        }
        #expect(store.statistics.errors >= 1, "the disk never filled")
        // A failed overwrite must not leave the old value to be served.
        store.put(key: Array("old".utf8), value: noise(200_000, seed: 99), expiry: 0)
        #expect(store.get(key: Array("old".utf8), now: 1) == nil)
        // Space freed: writes work again.
        _ = store.removeAll()
        store.put(key: Array("after".utf8), value: [1, 2, 3], expiry: 0)
        #expect(store.get(key: Array("after".utf8), now: 1)?.value == [1, 2, 3])
    }

    @Test func compressionLevelZeroStoresRaw() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory, level: 0)
        store.put(key: [1], value: jsonLike(5000), expiry: 0)
        #expect(store.statistics.rawWrites == 1)
        #expect(store.get(key: [1], now: 1)?.value == jsonLike(5000))
    }

    @Test func aValueLargerThanTheTierIsNotKept() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory, limit: 2000)
        store.put(key: [1], value: [1], expiry: 0)
        store.put(key: [1], value: noise(5000), expiry: 0)
        #expect(store.get(key: [1], now: 1) == nil, "the older value must not be served")
    }
}

@Suite("Disk worker", .dedicatedThreads)
struct CachetDiskWorkerTests {
    @Test func operationsRunInSubmissionOrder() async throws {
        let directory = TemporaryDirectory()
        let worker = CachetDiskWorker(store: try openStore(directory))
        #expect(worker.submitPut(key: [7], value: [1, 2, 3], expiry: 0).isQueued)
        let entry = await withCheckedContinuation { continuation in
            worker.get(key: [7], now: 1) { continuation.resume(returning: $0) }
        }
        #expect(entry?.value == [1, 2, 3])
        worker.submitRemove(key: [7])
        let after = await withCheckedContinuation { continuation in
            worker.get(key: [7], now: 1) { continuation.resume(returning: $0) }
        }
        #expect(after == nil)
    }

    @Test func capacityBoundsQueuedWrites() throws {
        let directory = TemporaryDirectory()
        let worker = CachetDiskWorker(store: try openStore(directory, capacity: 4))
        // Hold the queue with a slow read so that writes pile up.
        let gate = DispatchSemaphore(value: 0)
        worker.get(key: [0], now: 1) { _ in gate.wait() }
        for i in 0..<4 { #expect(worker.submitPut(key: [UInt8(i + 1)], value: [1], expiry: 0).isQueued) }
        #expect(!worker.submitPut(key: [9], value: [1], expiry: 0).isQueued)
        let woke = DispatchSemaphore(value: 0)
        worker.notifyWhenWritable { woke.signal() }
        gate.signal()
        #expect(woke.wait(timeout: .now() + 5) == .success)
        worker.drain()
        #expect(worker.queueDepth == 0)
        #expect(worker.store.statistics.items == 4)
    }

    @Test func queuedBytesBoundQueuedWritesAndAWriteLargerThanTheBoundGoesAlone() throws {
        let directory = TemporaryDirectory()
        let worker = CachetDiskWorker(store: try openStore(directory, byteCapacity: 100_000))
        let gate = DispatchSemaphore(value: 0)
        worker.get(key: [0], now: 1) { _ in gate.wait() }
        // Alone in the queue, a write larger than the bound is taken.
        #expect(worker.submitPut(key: [1], value: [UInt8](repeating: 1, count: 150_000), expiry: 0).isQueued)
        #expect(!worker.submitPut(key: [2], value: [2], expiry: 0).isQueued)
        #expect(worker.queuedBytes == 150_001)
        let woke = DispatchSemaphore(value: 0)
        // Woken once the large write is applied; then two of 40,000 fit, a third does not.
        worker.notifyWhenWritable { woke.signal() }
        gate.signal()
        #expect(woke.wait(timeout: .now() + 5) == .success)
        let second = DispatchSemaphore(value: 0)
        worker.get(key: [0], now: 1) { _ in second.wait() }
        let value = [UInt8](repeating: 3, count: 40_000)
        for key in 3...4 { #expect(worker.submitPut(key: [UInt8(key)], value: value, expiry: 0).isQueued) }
        #expect(!worker.submitPut(key: [5], value: [UInt8](repeating: 5, count: 40_000), expiry: 0).isQueued)
        second.signal()
        worker.drain()
        #expect(worker.queuedBytes == 0)
        #expect(worker.store.statistics.items == 3)
    }
}
