import CachetStore
import Testing

@Suite("Memory tier: PUTs written in place")
struct CachetPendingPutTests {
    func makeStore(limit: Int = 1 << 20) -> CachetMemoryStore {
        CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: limit, shardCount: 4))
    }

    func fill(_ pending: CachetPendingPut, with byte: UInt8) {
        pending.value.initializeMemory(as: UInt8.self, repeating: byte)
    }

    @Test func aCommittedPutReplacesTheOldValueOnlyWhenCommitted() throws {
        let store = makeStore()
        store.put(key: Array("k".utf8), value: [1, 2, 3])
        let pending = try #require(
            Array("k".utf8).withUnsafeBytes { store.reservePut(key: $0, valueLength: 5000, expiry: 0) }
        )
        #expect(pending.valueLength == 5000 && pending.value.count == 5000)
        fill(pending, with: 9)
        // Not committed yet: readers see the old value.
        #expect(store.value(forKey: Array("k".utf8)) == [1, 2, 3])
        #expect(store.commit(pending, now: 1) == .stored)
        #expect(store.value(forKey: Array("k".utf8)) == [UInt8](repeating: 9, count: 5000))
        #expect(store.statistics.items == 1)
        #expect(
            store.statistics.accountedBytes == CachetMemoryStore.accountedSize(keyLength: 1, valueLength: 5000)
        )
        // Committing twice does nothing.
        #expect(pending.value.count == 0)
        #expect(store.commit(pending, now: 1) == .tooLarge)
        #expect(store.statistics.items == 1)
    }

    @Test func anAbandonedPutLeavesNoTrace() throws {
        let store = makeStore()
        store.put(key: Array("k".utf8), value: [1, 2, 3])
        let before = store.statistics
        do {
            let pending = try #require(
                Array("k".utf8).withUnsafeBytes { store.reservePut(key: $0, valueLength: 100_000, expiry: 0) }
            )
            fill(pending, with: 7)
        }
        #expect(store.statistics == before)
        #expect(store.value(forKey: Array("k".utf8)) == [1, 2, 3])
    }

    @Test func tooLargeOrBadKeysAreRefused() {
        let store = makeStore(limit: 1 << 20)
        #expect(Array("k".utf8).withUnsafeBytes { store.reservePut(key: $0, valueLength: 2 << 20, expiry: 0) } == nil)
        #expect([UInt8]().withUnsafeBytes { store.reservePut(key: $0, valueLength: 10, expiry: 0) } == nil)
        #expect(store.statistics.items == 0)
    }

    @Test func commitEvictsToStayWithinTheLimit() throws {
        let limit = 1 << 20
        let store = makeStore(limit: limit)
        for index in 0..<10 {
            store.put(key: Array("old-\(index)".utf8), value: [UInt8](repeating: 1, count: 60_000))
        }
        let pending = try #require(
            Array("big".utf8).withUnsafeBytes { store.reservePut(key: $0, valueLength: 900_000, expiry: 0) }
        )
        fill(pending, with: 5)
        #expect(store.commit(pending, now: 1) == .stored)
        #expect(store.statistics.accountedBytes <= limit)
        #expect(store.value(forKey: Array("big".utf8))?.count == 900_000)
        #expect(store.statistics.evictions > 0)
    }

    @Test func expiryIsHonoured() throws {
        let store = makeStore()
        let pending = try #require(
            Array("t".utf8).withUnsafeBytes { store.reservePut(key: $0, valueLength: 10, expiry: 100) }
        )
        fill(pending, with: 1)
        store.commit(pending, now: 50)
        #expect(store.value(forKey: Array("t".utf8), now: 99) == [UInt8](repeating: 1, count: 10))
        #expect(store.value(forKey: Array("t".utf8), now: 100) == nil)
    }
}
