import CachetTestSupport
import Foundation
import Testing

@testable import CachetStore

#if canImport(Glibc)
import Glibc
#endif

/// Entry files in blocks (`Protocol/DISK-FORMAT.md`, "Entry file in blocks"): large values are written in
/// independently compressed blocks, a range is read from its own blocks, files of version 1 stay readable,
/// and uploads are staged and committed whole.
@Suite("Disk tier: values in blocks, ranges and uploads")
struct CachetDiskBlockTests {
    /// 3 MiB and a bit: noise (stored raw) then text (deflated), so both kinds of block are in one file.
    static let value =
        noise(1_600_000, seed: 7) + Array(repeating: jsonLike(100_000), count: 16).flatMap { $0 } + noise(17, seed: 8)
    static let key = Array("video:42".utf8)

    static func range(_ store: CachetDiskStore, _ offset: Int, _ length: UInt64, limit: Int = .max) -> CachetDiskRange {
        store.getRange(key: key, offset: UInt64(offset), length: length, limit: limit, now: 1000)
    }

    static func expectSlice(_ read: CachetDiskRange, _ bounds: Range<Int>, of value: [UInt8]) {
        guard case .bytes(let total, let tag, _, let bytes) = read else {
            Issue.record("expected bytes \(bounds), got \(read)")
            return
        }
        #expect(total == value.count)
        #expect(tag == value.withUnsafeBytes { CachetValueTag.of($0) })
        #expect((bytes == Array(value[bounds])) == true, "bytes \(bounds)")
    }

    @Test func aLargeValueIsWrittenInBlocksAndReadWholeOrByRange() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        let value = Self.value
        store.put(key: Self.key, value: value, expiry: 0)
        let file = try #require(entryFiles(directory).first)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
        #expect(bytes[4] == BlockEntryFormat.version)
        #expect(bytes.count < value.count, "the text blocks are deflated")
        #expect((store.get(key: Self.key, now: 1000)?.value == value) == true, "the value read whole")
        let block = BlockEntryFormat.blockSize
        for bounds in [
            0..<1, (block - 1)..<(block + 1), block..<(2 * block), (block - 5)..<(3 * block + 5),
            (value.count - 1)..<value.count, 1_599_990..<1_600_010, 0..<value.count,
        ] {
            Self.expectSlice(Self.range(store, bounds.lowerBound, UInt64(bounds.count)), bounds, of: value)
        }
        // To the end, cut at the end, empty at the end, past the end.
        Self.expectSlice(Self.range(store, value.count - 10, .max), (value.count - 10)..<value.count, of: value)
        Self.expectSlice(Self.range(store, value.count - 3, 100), (value.count - 3)..<value.count, of: value)
        Self.expectSlice(Self.range(store, value.count, 5), value.count..<value.count, of: value)
        Self.expectSlice(Self.range(store, 5, 0), 5..<5, of: value)
        let tag = value.withUnsafeBytes { CachetValueTag.of($0) }
        #expect(Self.range(store, value.count + 1, 1) == .unsatisfiable(total: value.count, tag: tag))
        // Cut at the caller's limit.
        Self.expectSlice(Self.range(store, 100, .max, limit: 1000), 100..<1100, of: value)
        #expect(Self.range(store, 0, 1).isBytes)
        #expect(store.getRange(key: Array("absent".utf8), offset: 0, length: 1, limit: 10, now: 1000) == .miss)
    }

    @Test func aRangeReadsOnlyItsBlocks() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        let value = Self.value
        store.put(key: Self.key, value: value, expiry: 0)
        let file = try #require(entryFiles(directory).first)
        // Damage the last block's bytes: a range of the first block never reads them.
        let fd = open(file, O_RDWR)
        var info = stat()
        fstat(fd, &info)
        var byte: UInt8 = 0
        pread(fd, &byte, 1, off_t(info.st_size - 3))
        byte ^= 0xff
        pwrite(fd, &byte, 1, off_t(info.st_size - 3))
        Glibc.close(fd)
        Self.expectSlice(Self.range(store, 10, 1000), 10..<1010, of: value)
        #expect(store.statistics.corrupt == 0)
        // The damaged block is caught by its CRC: a miss, the file deleted and counted.
        #expect(Self.range(store, value.count - 5, 5) == .miss)
        #expect(store.statistics.corrupt == 1)
        #expect(entryFiles(directory).isEmpty)
    }

    @Test func aRawBlockReadInPlaceIsCheckedToo() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        store.put(key: Self.key, value: Self.value, expiry: 0)
        let file = try #require(entryFiles(directory).first)
        // The third block is noise, stored raw after the header, the key and a table of 13 blocks.
        let block = BlockEntryFormat.blockSize
        let payloadStart = BlockEntryFormat.headerSize + Self.key.count + BlockEntryFormat.tableSize(blockCount: 13)
        let fd = open(file, O_RDWR)
        var byte: UInt8 = 0
        pread(fd, &byte, 1, off_t(payloadStart + 2 * block + 100))
        byte ^= 0x01
        pwrite(fd, &byte, 1, off_t(payloadStart + 2 * block + 100))
        Glibc.close(fd)
        // A range of whole blocks before it is read in place and served; one that holds it is not.
        Self.expectSlice(Self.range(store, block, UInt64(block)), block..<(2 * block), of: Self.value)
        #expect(Self.range(store, 2 * block, UInt64(block)) == .miss)
        #expect(store.statistics.corrupt == 1)
    }

    @Test func aLargeFileOfVersionOneIsStillRead() throws {
        let directory = TemporaryDirectory()
        let value = Self.value
        do {
            let store = try openStore(directory)
            store.put(key: Self.key, value: [1, 2, 3], expiry: 0)
            // Replace the file with the layout every value had before blocks.
            let file = try #require(entryFiles(directory).first)
            let old = DiskEntryFormat.encodeSingle(key: Self.key, value: value, expiry: 0, level: 1).file
            #expect(old[4] == 1)
            try Data(old).write(to: URL(fileURLWithPath: file))
            store.abandonAsIfKilled()
        }
        // Opened after a crash: the index is rebuilt from the files' headers.
        let store = try openStore(directory)
        store.startRecovery()
        store.waitForRecovery()
        #expect((store.get(key: Self.key, now: 1000)?.value == value) == true, "the value read whole")
        Self.expectSlice(Self.range(store, 262_140, 10), 262_140..<262_150, of: value)
        Self.expectSlice(Self.range(store, value.count - 1, .max), (value.count - 1)..<value.count, of: value)
    }

    @Test func aRangeOfAKeyNotIndexedYetAfterACrashReadsOnlyItsBlocks() throws {
        let directory = TemporaryDirectory()
        do {
            let store = try openStore(directory)
            store.put(key: Self.key, value: Self.value, expiry: 0)
            store.abandonAsIfKilled()
        }
        let store = try openStore(directory)
        // No index file after a crash, and no scan started: the key is not indexed yet.
        #expect(store.statistics.recovering)
        Self.expectSlice(Self.range(store, 300_000, 1000), 300_000..<301_000, of: Self.value)
        store.startRecovery()
        store.waitForRecovery()
        Self.expectSlice(Self.range(store, 0, 10), 0..<10, of: Self.value)
    }

    @Test func aShortValueKeepsVersionOneAndItsRangesCarryTheTag() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        let value = jsonLike(5000)
        store.put(key: Self.key, value: value, expiry: 0)
        let file = try #require(entryFiles(directory).first)
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))[4] == 1)
        Self.expectSlice(Self.range(store, 4990, 100), 4990..<5000, of: value)
    }

    @Test func aValueLongerThanTheReadersLimitIsReportedNotRead() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        store.put(key: Self.key, value: Self.value, expiry: 0)
        let entry = try #require(store.get(key: Self.key, now: 1000, maximumValueLength: 1 << 20))
        #expect(entry.value.isEmpty)
        #expect(entry.oversizedLength == Self.value.count)
    }

    // MARK: Uploads

    static func upload(
        _ worker: CachetDiskWorker,
        _ value: [UInt8],
        parts: [Int],
        commit: Bool = true
    ) throws -> (CachetDiskUpload, CachetStoreError?) {
        let upload = worker.beginUpload(key: key, total: value.count, expiry: 0)
        var offset = 0
        for size in parts + [value.count] where offset < value.count {
            let end = min(value.count, offset + size)
            let failure = Locked<String?>(nil)
            worker.writeUpload(upload, bytes: Array(value[offset..<end])) { failure.value = $0 }
            worker.drain()
            #expect(failure.value == nil)
            offset = end
        }
        guard commit else { return (upload, nil) }
        worker.beginWrite(key: key.withUnsafeBytes { $0 })
        let result = Locked<CachetStoreError?>(nil)
        let admission = worker.submitUploadCommit(upload) { result.value = $0 }
        #expect(admission.isQueued)
        worker.drain()
        return (upload, result.value)
    }

    @Test func anUploadIsStagedAndThenReplacesTheValueWhole() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        let worker = CachetDiskWorker(store: store)
        store.put(key: Self.key, value: Array("older".utf8), expiry: 0)
        let value = Self.value
        // Parts of uneven sizes, not aligned to blocks; not committed yet.
        let (upload, _) = try Self.upload(
            worker,
            value,
            parts: [1, 70_000, 500_000, 262_144, 1_000_000],
            commit: false
        )
        #expect(store.get(key: Self.key, now: 1000)?.value == Array("older".utf8), "readers see the older value")
        #expect(DiskFiles.list(directory.appending("uploads")).count == 1)
        worker.beginWrite(key: Self.key.withUnsafeBytes { $0 })
        let failure = Locked<CachetStoreError?>(nil)
        #expect(worker.submitUploadCommit(upload) { failure.value = $0 }.isQueued)
        worker.drain()
        #expect(failure.value == nil)
        #expect((store.get(key: Self.key, now: 1000)?.value == value) == true, "the value read whole")
        Self.expectSlice(Self.range(store, 262_000, 1000), 262_000..<263_000, of: value)
        #expect(DiskFiles.list(directory.appending("uploads")).isEmpty)
        #expect(store.statistics.items == 1)
    }

    @Test func anEmptyAndAOnePartUploadAreStored() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory)
        let worker = CachetDiskWorker(store: store)
        #expect(try Self.upload(worker, [], parts: []).1 == nil)
        #expect(store.get(key: Self.key, now: 1000)?.value == [])
        #expect(try Self.upload(worker, [9, 8, 7], parts: [3]).1 == nil)
        #expect(store.get(key: Self.key, now: 1000)?.value == [9, 8, 7])
    }

    @Test func anAbandonedUploadLeavesNothingAndLeftoversGoAtOpen() throws {
        let directory = TemporaryDirectory()
        do {
            let store = try openStore(directory)
            let worker = CachetDiskWorker(store: store)
            let (upload, _) = try Self.upload(worker, Self.value, parts: [1_000_000], commit: false)
            worker.abortUpload(upload)
            worker.drain()
            #expect(DiskFiles.list(directory.appending("uploads")).isEmpty)
            #expect(store.get(key: Self.key, now: 1000)?.value.count == nil)
            // One left behind, as a crash would.
            _ = try Self.upload(worker, Self.value, parts: [1_000_000], commit: false)
            #expect(DiskFiles.list(directory.appending("uploads")).count == 1)
            store.abandonAsIfKilled()
        }
        let store = try openStore(directory)
        #expect(DiskFiles.list(directory.appending("uploads")).isEmpty)
        #expect(store.get(key: Self.key, now: 1000)?.value.count == nil)
    }

    @Test func anUploadLargerThanTheTierIsRefusedAndTheKeyIsAMiss() throws {
        let directory = TemporaryDirectory()
        let store = try openStore(directory, limit: 2 << 20)
        let worker = CachetDiskWorker(store: store)
        store.put(key: Self.key, value: [1], expiry: 0)
        let (_, failure) = try Self.upload(worker, noise(3 << 20), parts: [1 << 20])
        #expect(failure?.code == .writeRefused)
        #expect(store.get(key: Self.key, now: 1000)?.value.count == nil, "the older value is gone too")
        #expect(DiskFiles.list(directory.appending("uploads")).isEmpty)
    }
}

extension CachetDiskRange {
    var isBytes: Bool {
        if case .bytes = self { return true }
        return false
    }
}

/// A value set from a completion and read after the queue drained.
final class Locked<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value
    init(_ value: Value) { stored = value }
    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
