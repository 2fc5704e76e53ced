import CachetLocking
import CachetTestSupport
import Foundation
import Logging
import Testing

@testable import CachetStore

#if canImport(Glibc)
import Glibc
#endif

/// Log lines kept for inspection.
final class CapturedLog: Sendable {
    struct Line: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
    }

    private let lines = CachetLock<[Line]>([])

    func append(_ line: Line) { lines.withLock { $0.append(line) } }

    func lines(at level: Logger.Level) -> [Line] { lines.withLock { $0.filter { $0.level == level } } }

    /// A logger whose lines land here.
    func logger() -> Logger {
        Logger(label: "cachet.test.disk") { _ in Handler(log: self) }
    }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            log.append(
                Line(
                    level: event.level,
                    message: event.message.description,
                    metadata: metadata.merging(event.metadata ?? [:]) { $1 }
                )
            )
        }
    }
}

@Suite("Disk tier edges", .dedicatedThreads)
struct CachetDiskStoreEdgeTests {
    @Test(arguments: [0, 4097, 70_000])
    func aKeyTheFormatCannotHoldIsRefusedAndTheOlderCopyGoes(length: Int) throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        let key = [UInt8](repeating: 0x6b, count: length)
        store.put(key: key, value: [1, 2, 3], expiry: 0)
        #expect(store.get(key: key, now: 1) == nil)
        #expect(store.statistics.errors == 1)
        #expect(store.statistics.items == 0)
        #expect(store.statistics.corrupt == 0)
        #expect(entryFiles(directory).isEmpty)
    }

    @Test func theLongestKeySurvivesARestartScan() throws {
        let directory = TemporaryDirectory()
        let key = [UInt8](repeating: 0x6b, count: DiskEntryFormat.maximumKeyLength)
        do {
            let store = try openStore(directory)
            store.put(key: key, value: jsonLike(300), expiry: 0)
            store.close()
        }
        try FileManager.default.removeItem(atPath: directory.appending("index"))
        let store = try openStore(directory)
        store.startRecovery()
        store.waitForRecovery()
        #expect(store.statistics.items == 1)
        #expect(store.statistics.corrupt == 0)
        #expect(store.statistics.logicalBytes == DiskEntryFormat.maximumKeyLength + 300)
        #expect(store.get(key: key, now: 1)?.value == jsonLike(300))
    }

    @Test func anEntryOfMaximumEntryBytesFitsEvenRaw() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory, limit: 4096)
        // One file header and the entry's record in the index file a clean shutdown writes.
        #expect(store.maximumEntryBytes == 4096 - 28 - 52)
        let fits = noise(store.maximumEntryBytes - 3)
        store.put(key: Array("fit".utf8), value: fits, expiry: 0)
        #expect(store.get(key: Array("fit".utf8), now: 1)?.value == fits)
        #expect(store.statistics.bytes == 4096 - 52)
        store.put(key: Array("big".utf8), value: noise(store.maximumEntryBytes - 2), expiry: 0)
        #expect(store.get(key: Array("big".utf8), now: 1) == nil)
        #expect(store.get(key: Array("fit".utf8), now: 1)?.value == fits)
        store.close()
    }

    @Test func aClosedStoreLeavesTheDirectoryToItsNextOwner() throws {
        let directory = TemporaryDirectory()
        let first = try openStore(directory)
        first.put(key: Array("a".utf8), value: [1], expiry: 0)
        first.put(key: Array("b".utf8), value: [2], expiry: 0)
        first.close()
        try FileManager.default.removeItem(atPath: directory.appending("index"))
        let second = try openStore(directory)  // recovering: the first store's index is gone
        #expect(first.get(key: Array("a".utf8), now: 1) == nil)
        #expect(!first.remove(key: Array("a".utf8)))
        #expect(first.removeAll() == (items: 0, bytes: 0))
        first.put(key: Array("b".utf8), value: [9], expiry: 0)
        #expect(first.statistics.errors == 1)
        #expect(first.sweepExpired(now: .max, budget: 10) == 0)
        #expect(entryFiles(directory).count == 2)
        #expect(second.get(key: Array("a".utf8), now: 1)?.value == [1])
        #expect(second.get(key: Array("b".utf8), now: 1)?.value == [2])
        second.close()
    }

    @Test func aDataDirectoryThatIsAFileTurnsTheTierOff() throws {
        let directory = TemporaryDirectory()
        let path = directory.appending("data")
        #expect(FileManager.default.createFile(atPath: path, contents: Data([7])))
        let log = CapturedLog()
        let store = try CachetDiskStore(
            configuration: CachetDiskConfiguration(directory: path, limit: 1 << 20),
            logger: log.logger()
        )
        #expect(!store.statistics.writable)
        #expect(store.statistics.errors == 1)
        store.put(key: [1], value: [2], expiry: 0)
        #expect(store.get(key: [1], now: 1) == nil)
        #expect(store.statistics.errors == 2)
        let errors = log.lines(at: .error)
        #expect(errors.count == 1)
        #expect(errors.first?.message == "cannot create the data directory; the disk tier is off")
        #expect(errors.first?.metadata["error.message"] == "Not a directory")
        #expect(FileManager.default.contents(atPath: path) == Data([7]))
        store.close()
    }

    @Test func repeatedFailuresAreWarnedAboutOncePerInterval() throws {
        let directory = TemporaryDirectory()
        // A regular file wherever a first-level fan-out directory would go: every write fails (ENOTDIR).
        for first in 0..<256 {
            let name = String(first, radix: 16)
            #expect(
                FileManager.default.createFile(
                    atPath: directory.appending(first < 16 ? "0" + name : name),
                    contents: nil
                )
            )
        }
        var configuration = CachetDiskConfiguration(directory: directory.path, limit: 1 << 20)
        configuration.failureWarningInterval = 400_000_000
        let log = CapturedLog()
        let store = try CachetDiskStore(configuration: configuration, logger: log.logger())
        for i in 0..<50 { store.put(key: Array("key\(i)".utf8), value: [1], expiry: 0) }
        #expect(store.statistics.errors == 50)
        #expect(store.statistics.items == 0)
        var warnings = log.lines(at: .warning)
        #expect(warnings.count == 1)
        #expect(warnings.first?.message == "disk write failed; the entry stays in memory only")
        #expect(warnings.first?.metadata["error.message"] == "Not a directory")
        #expect(warnings.first?.metadata["disk.warnings_held_back"] == nil)
        usleep(450_000)
        store.put(key: Array("late".utf8), value: [1], expiry: 0)
        warnings = log.lines(at: .warning)
        #expect(warnings.count == 2)
        #expect(warnings.last?.metadata["disk.warnings_held_back"] == "49")
        #expect(store.statistics.errors == 51)
        store.close()
    }

    @Test func afterACrashTheLimitEvictsTheOldestWritesFirst() throws {
        let directory = TemporaryDirectory()
        let keys = (0..<20).map { Array(String(format: "key%02d", $0).utf8) }
        let fileSize = DiskEntryFormat.headerSize + 5 + 1000
        do {
            let store = try openStore(directory)
            for (i, key) in keys.enumerated() { store.put(key: key, value: noise(1000, seed: UInt64(i)), expiry: 0) }
            store.close()
        }
        // As after kill -9: no index file. Write times in an order unrelated to names or hashes.
        try FileManager.default.removeItem(atPath: directory.appending("index"))
        let rank = (0..<20).map { ($0 * 7) % 20 }
        for (i, key) in keys.enumerated() {
            let hex = key.withUnsafeBytes { KeyDigest(of: $0) }.hex
            let path = directory.appending("\(hex.prefix(2))/\(hex.dropFirst(2).prefix(2))/\(hex)")
            try FileManager.default.setAttributes(
                [.modificationDate: Date(timeIntervalSince1970: 1_700_000_000 + Double(rank[i]) * 10)],
                ofItemAtPath: path
            )
        }
        let store = try openStore(directory, limit: 5 * (fileSize + CachetDiskStore.indexRecordSize))
        // Read the oldest write before the scan: a read makes it the most recently used.
        #expect(store.get(key: keys[0], now: 1)?.value == noise(1000, seed: 0))
        store.startRecovery()
        store.waitForRecovery()
        let newest = (0..<20).sorted { rank[$0] > rank[$1] }.prefix(4)
        #expect(Array(newest) == [17, 14, 11, 8])
        #expect(store.statistics.items == 5)
        #expect(store.statistics.evictions == 15)
        for i in 0..<20 {
            let kept = i == 0 || newest.contains(i)
            #expect(keys[i].withUnsafeBytes { store.contains(key: $0, now: 1) } == kept, "key\(i)")
        }
        #expect(entryFiles(directory).count == 5)
        store.close()
    }
}

@Suite("Disk tier expiry sweep", .dedicatedThreads)
struct CachetDiskSweepTests {
    @Test func sweepsDeleteExpiredEntriesABudgetAtATime() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        // Even keys expire at 100, odd ones never; index slots follow the order of the writes.
        for i in 0..<10 { store.put(key: [UInt8(i + 1)], value: [UInt8(i)], expiry: i % 2 == 0 ? 100 : 0) }
        #expect(store.sweepExpired(now: 50, budget: 100) == 0)
        #expect(store.sweepExpired(now: 200, budget: 3) == 2)  // slots 0, 1, 2
        #expect(store.statistics.items == 8)
        #expect(store.sweepExpired(now: 200, budget: 10) == 3)  // slots 3 to 9, then around to 0 to 2
        #expect(store.sweepExpired(now: 200, budget: 10) == 0)
        let statistics = store.statistics
        #expect(statistics.items == 5)
        #expect(statistics.expired == 5)
        #expect(statistics.logicalBytes == 10)
        #expect(entryFiles(directory).count == 5)
        for i in stride(from: 1, to: 10, by: 2) {
            #expect(store.get(key: [UInt8(i + 1)], now: 200)?.value == [UInt8(i)])
        }
        store.close()
    }

    @Test func expiredEntriesAreCountedWhereverTheyAreFound() throws {
        let directory = TemporaryDirectory()
        let now = CachetClock.now()
        do {
            let store = try openStore(directory)
            store.put(key: Array("read".utf8), value: [1], expiry: now + 1)
            store.put(key: Array("scanned".utf8), value: [2], expiry: now + 1)
            store.put(key: Array("kept".utf8), value: [3], expiry: 0)
            #expect(store.get(key: Array("read".utf8), now: now + 1) == nil)
            #expect(store.statistics.expired == 1)
            store.close()
        }
        try FileManager.default.removeItem(atPath: directory.appending("index"))
        // The rebuild judges expiry by the clock: wait until "scanned" is past it.
        while CachetClock.now() <= now + 1 { usleep(50_000) }
        let store = try openStore(directory)
        store.startRecovery()
        store.waitForRecovery()
        #expect(store.statistics.expired == 1)
        #expect(store.statistics.items == 1)
        #expect(entryFiles(directory).count == 1)
        store.close()
    }

    @Test func theWorkerQueuesOneSweepAtATime() throws {
        let directory = TemporaryDirectory()
        let worker = CachetDiskWorker(store: try openStore(directory))
        // Hold the queue with a slow read so that everything after it waits.
        let gate = DispatchSemaphore(value: 0)
        worker.get(key: [0], now: 1) { _ in gate.wait() }
        for i in 0..<6 { #expect(worker.submitPut(key: [UInt8(i + 1)], value: [1], expiry: 100).isQueued) }
        worker.submitSweep(now: 200, budget: 2)
        worker.submitSweep(now: 200, budget: 2)  // one is already waiting: dropped
        #expect(worker.queueDepth == 8)  // the held read, six writes, one sweep
        gate.signal()
        worker.drain()
        #expect(worker.store.statistics.items == 4)
        worker.submitSweep(now: 200, budget: 10)
        worker.drain()
        #expect(worker.store.statistics.items == 0)
        #expect(worker.store.statistics.expired == 6)
    }
}
