import CachetTestSupport
import Foundation
import Testing

@testable import CachetStore

/// Item fields (the client's flags and the CAS unique memcached keeps with an item): kept in memory entries
/// only when given, counted against the limit, given a CAS unique on demand; kept in entry files of version 1
/// (of any length), checked by the header's CRC, and read back after a restart.
@Suite("Item fields")
struct CachetItemFieldsTests {
    /// memcached's `mg h` and `mg u`: whether an item was read since it was stored, and reads that do not
    /// mark it.
    @Test func metaGetsTellWhetherTheItemWasReadBeforeAndMayLeaveItUnmarked() {
        let store = CachetMemoryStoreTests.store(limit: 1 << 20)
        let source = CachetCASSource(epoch: 5)
        Array("k".utf8).withUnsafeBytes { key in
            Array("value".utf8).withUnsafeBytes { value in
                func metaGet(marking: Bool) -> Bool? {
                    store.withItemForMetaGet(forKey: key, now: 1, cas: source.next, marking: marking) { $3.hitBefore }
                }
                store.put(key: key, value: value, expiry: 0, now: 1)
                // Not marked by an unmarking read (which also gives the item its CAS unique, storing it anew).
                #expect(metaGet(marking: false) == false)
                #expect(metaGet(marking: false) == false)
                #expect(metaGet(marking: true) == false)
                #expect(metaGet(marking: false) == true)
                // A plain read marks it too; a write starts over.
                store.put(key: key, value: value, expiry: 0, now: 1)
                #expect(store.withValue(forKey: key, now: 1) { value, _ in value.count } == 5)
                #expect(store.readState(forKey: key, now: 1, marking: false) == true)
                store.put(key: key, value: value, expiry: 0, now: 1)
                #expect(store.readState(forKey: key, now: 1, marking: true) == false)
                #expect(store.readState(forKey: key, now: 1, marking: false) == true)
                #expect(
                    store.readState(forKey: Array("absent".utf8).withUnsafeBytes { $0 }, now: 1, marking: true) == nil
                )
            }
        }
    }

    /// memcached's `mg l`: seconds since the item was last read or written, the access time moved by a
    /// marking read at most once a minute; kept in the entry's link words, which still link the LRU list.
    @Test func metaGetsTellTheSecondsSinceTheLastAccess() {
        let store = CachetMemoryStoreTests.store(limit: 1 << 20)
        let source = CachetCASSource(epoch: 5)
        let start = CachetClock.now()
        Array("k".utf8).withUnsafeBytes { key in
            Array("value".utf8).withUnsafeBytes { value in
                func idle(at seconds: UInt32, marking: Bool) -> UInt32? {
                    store.withItemForMetaGet(forKey: key, now: start + seconds, cas: source.next, marking: marking) {
                        $3.idleSeconds
                    }
                }
                store.put(key: key, value: value, expiry: 0, now: start)
                // Other entries around it, so that its links point somewhere.
                for index in 0..<10 {
                    Array("other-\(index)".utf8).withUnsafeBytes {
                        store.put(key: $0, value: value, expiry: 0, now: start)
                    }
                }
                #expect(idle(at: 30, marking: true) == 30, "under a minute: not moved")
                #expect(idle(at: 90, marking: false) == 90, "an unmarking read does not move it")
                #expect(idle(at: 90, marking: true) == 0, "a minute old: moved to this read")
                #expect(idle(at: 100, marking: true) == 10)
                // A write starts it over; the LRU list is intact (every entry still read back).
                let before = CachetClock.now()
                store.put(key: key, value: value, expiry: 0, now: start)
                #expect((idle(at: before - start + 5, marking: false) ?? 99) <= 5)
                for index in 0..<10 {
                    let read = Array("other-\(index)".utf8).withUnsafeBytes {
                        store.withValue(forKey: $0, now: start) { value, _ in value.count }
                    }
                    #expect(read == 5)
                }
            }
        }
    }

    @Test func memoryEntriesKeepFieldsOnlyWhenGivenAndCountThem() {
        let store = CachetMemoryStoreTests.store(limit: 1 << 20)
        let key = Array("k".utf8)
        let value = Array("value".utf8)
        let fields = CachetItemFields(flags: 0xdead_beef, cas: 0x0102_0304_0506_0708)
        key.withUnsafeBytes { key in
            value.withUnsafeBytes { value in
                store.put(key: key, value: value, expiry: 0, now: 1)
                let plain = store.statistics.accountedBytes
                #expect(store.withItem(forKey: key, now: 1) { $2 } == .some(nil))
                store.put(key: key, value: value, expiry: 0, now: 1, fields: fields)
                #expect(
                    store.withItem(forKey: key, now: 1) { Array($0) + [UInt8]($2 == fields ? [1] : [0]) } == Array(
                        "value".utf8
                    ) + [1]
                )
                #expect(store.statistics.accountedBytes > plain, "\(store.statistics.accountedBytes) \(plain)")
                // A plain write drops them; a CAS asked for later is given once and kept.
                store.put(key: key, value: value, expiry: 0, now: 1)
                let source = CachetCASSource(epoch: 5)
                let first = store.withItemGivingCAS(forKey: key, now: 1, cas: source.next) { $2 }
                let again = store.withItemGivingCAS(forKey: key, now: 1, cas: source.next) { $2 }
                #expect(first != nil && first == again && first?.flags == 0 && first?.cas != 0)
                #expect(store.withItem(forKey: key, now: 1) { value, _, _ in Array(value) } == Array("value".utf8))
                #expect(
                    store.withItemGivingCAS(
                        forKey: Array("absent".utf8).withUnsafeBytes { $0 },
                        now: 1,
                        cas: source.next
                    ) { $2 } == nil
                )
            }
        }
    }

    @Test func casUniquesNeverRepeatAndStartFromTheEpoch() {
        let source = CachetCASSource(epoch: 7)
        let uniques = (0..<1000).map { _ in source.next() }
        #expect(Set(uniques).count == 1000 && uniques.allSatisfy { $0 >> 40 == 7 && $0 != 0 })
        #expect(CachetCASSource(epoch: 8).next() > uniques.last!)
    }

    @Test(arguments: [5, 2_000_000])
    func entryFilesKeepFieldsAcrossARestartAndTheirCRCCoversThem(length: Int) throws {
        let directory = TemporaryDirectory()
        let key = Array("item".utf8)
        let value = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let fields = CachetItemFields(flags: 42, cas: 99)
        do {
            let store = try openStore(directory)
            store.put(key: key, value: value, expiry: 0, fields: fields)
            store.put(key: Array("plain".utf8), value: value, expiry: 0)
            let read = try #require(store.get(key: key, now: 1))
            #expect(read.fields == fields && (read.value == value) == true)
            #expect(store.get(key: Array("plain".utf8), now: 1)?.fields == nil)
            store.close()
        }
        let store = try openStore(directory)
        #expect(store.get(key: key, now: 1)?.fields == fields)
        // A range of it reads the right bytes (the fields are not part of the value).
        guard case .bytes(_, _, _, let bytes) = store.getRange(key: key, offset: 1, length: 3, limit: .max, now: 1)
        else {
            Issue.record("no range")
            return
        }
        #expect(bytes == Array(value[1..<4]))
        store.close()
        // A flipped bit in the fields fails the header's CRC: the file is corrupt, never other flags.
        let file = try #require(
            entryFiles(directory).first { path in
                (try? Data(contentsOf: URL(fileURLWithPath: path)))?.range(of: Data("item".utf8)) != nil
            }
        )
        var bytes2 = try Data(contentsOf: URL(fileURLWithPath: file))
        bytes2[28 + key.count + 3] ^= 0x01
        try bytes2.write(to: URL(fileURLWithPath: file))
        let reopened = try openStore(directory)
        #expect(reopened.get(key: key, now: 1) == nil)
        reopened.close()
    }
}
