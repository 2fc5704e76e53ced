import CachetTestSupport
import Foundation
import Logging
import Testing

@testable import CachetStore

#if canImport(Glibc)
import Glibc
#endif

@Suite("Disk tier edges")
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
}
