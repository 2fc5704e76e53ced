import CachetStore
import CachetTestSupport
import Dispatch
import Testing

/// The obvious second-chance LRU: a dictionary, an array from the front of the list to the back, and the
/// set of keys read since they were last moved to the front.
struct ModelLRU {
    var entries: [[UInt8]: (value: [UInt8], expiry: UInt32)] = [:]
    var order: [[UInt8]] = []
    var referenced: Set<[UInt8]> = []
    var bytes = 0
    var evictions = 0
    var expired = 0
    let limit: Int

    static func size(_ key: [UInt8], _ value: [UInt8]) -> Int {
        CachetMemoryStore.accountedSize(keyLength: key.count, valueLength: value.count)
    }

    mutating func drop(_ key: [UInt8]) {
        let old = entries.removeValue(forKey: key)!
        bytes -= Self.size(key, old.value)
        order.removeAll { $0 == key }
        referenced.remove(key)
    }

    mutating func moveToFront(_ key: [UInt8]) {
        order.removeAll { $0 == key }
        order.insert(key, at: 0)
    }

    mutating func put(_ key: [UInt8], _ value: [UInt8], expiry: UInt32) -> CachetPutOutcome {
        guard Self.size(key, value) <= limit else { return .tooLarge }
        if entries[key] != nil { drop(key) }
        entries[key] = (value, expiry)
        order.insert(key, at: 0)
        bytes += Self.size(key, value)
        while bytes > limit {
            // From the back: a marked entry (or the new one) goes to the front, its mark cleared.
            while let last = order.last, last == key ? order.count > 1 : referenced.contains(last) {
                referenced.remove(last)
                moveToFront(last)
            }
            guard let victim = order.last, victim != key else { break }
            drop(victim)
            evictions += 1
        }
        return .stored
    }

    mutating func get(_ key: [UInt8], now: UInt32) -> [UInt8]? {
        guard let entry = entries[key] else { return nil }
        if entry.expiry != 0 && entry.expiry <= now {
            drop(key)
            expired += 1
            return nil
        }
        referenced.insert(key)
        return entry.value
    }

    mutating func remove(_ key: [UInt8], now: UInt32) -> Bool {
        guard let entry = entries[key] else { return false }
        drop(key)
        if entry.expiry != 0 && entry.expiry <= now {
            expired += 1
            return false
        }
        return true
    }
}

@Suite("Memory tier")
struct CachetMemoryStoreTests {
    static func store(limit: Int, shards: Int = 1) -> CachetMemoryStore {
        CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: limit, shardCount: shards))
    }

    @Test(arguments: [1, 2, 3, 4, 5])
    func randomOperationsMatchTheModel(seed: UInt64) {
        var random = SplitMix64(state: seed)
        let limit = 20_000
        let store = Self.store(limit: limit)
        var model = ModelLRU(limit: limit)
        var now: UInt32 = 1_000
        for step in 0..<4_000 {
            let key = Array("key-\(random.next() % 60)".utf8)
            switch random.next() % 10 {
            case 0...3:
                let length = Int(random.next() % 700)
                let value = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                let expiry: UInt32 = random.next() % 4 == 0 ? now + UInt32(random.next() % 5) : 0
                #expect(
                    store.put(key: key, value: value, expiry: expiry, now: now)
                        == model.put(key, value, expiry: expiry),
                    "step \(step)"
                )
            case 4...6:
                #expect(store.value(forKey: key, now: now) == model.get(key, now: now), "step \(step)")
            case 7:
                #expect(store.remove(key: key, now: now) == model.remove(key, now: now), "step \(step)")
            case 8:
                now += UInt32(random.next() % 3)
            default:
                if random.next() % 50 == 0 {
                    let removed = store.removeAll()
                    #expect(removed.items == model.entries.count)
                    #expect(removed.bytes == model.entries.reduce(0) { $0 + $1.key.count + $1.value.value.count })
                    model.entries = [:]
                    model.order = []
                    model.referenced = []
                    model.bytes = 0
                }
            }
            store._checkInvariants()
            #expect(store._keysInRecencyOrder() == model.order, "recency order differs at step \(step)")
            #expect(store._referencedKeys() == model.referenced, "second-chance marks differ at step \(step)")
            if store._keysInRecencyOrder() != model.order || store._referencedKeys() != model.referenced { return }
        }
        let statistics = store.statistics
        #expect(statistics.items == model.entries.count)
        #expect(statistics.accountedBytes == model.bytes)
        #expect(statistics.evictions == model.evictions)
        #expect(statistics.expired == model.expired)
    }

    @Test func evictsTheLeastRecentlyUsedAndAReadRefreshes() {
        let entry = CachetMemoryStore.accountedSize(keyLength: 1, valueLength: 100)
        let store = Self.store(limit: entry * 3)
        let value = [UInt8](repeating: 1, count: 100)
        store.put(key: [1], value: value)
        store.put(key: [2], value: value)
        store.put(key: [3], value: value)
        #expect(store.value(forKey: [1]) != nil)  // 1 is marked: eviction passes it over once; 2 is next
        store.put(key: [4], value: value)
        #expect(store.value(forKey: [2]) == nil)
        #expect(store.value(forKey: [1]) == value)
        #expect(store.value(forKey: [3]) == value)
        #expect(store.value(forKey: [4]) == value)
        #expect(store.statistics.evictions == 1)
        store._checkInvariants()
    }

    @Test(arguments: [1, 4])
    func removingByPrefixKeepsEveryOtherEntryAndTheAccounts(shards: Int) {
        let store = Self.store(limit: 1 << 20, shards: shards)
        var kept: [[UInt8]: [UInt8]] = [:]
        var removedBytes = 0
        for index in 0..<200 {
            let key = Array((["a:", "b:", "ab", "c"][index % 4] + "\(index)").utf8)
            let value = [UInt8](repeating: UInt8(index & 0xff), count: index % 7)
            store.put(key: key, value: value)
            if key.starts(with: Array("a:".utf8)) || key.starts(with: Array("c".utf8)) {
                removedBytes += key.count + value.count
            } else {
                kept[key] = value
            }
        }
        var visited = 0
        let removed = store.removeAll(prefixes: [Array("a:".utf8), Array("c".utf8)]) { _, _ in visited += 1 }
        #expect(removed.items == 100 && visited == 100 && removed.bytes == removedBytes)
        #expect(store.statistics.items == kept.count)
        for (key, value) in kept { #expect(store.value(forKey: key) == value) }
        #expect(store.removeAll(prefixes: []) == (items: 0, bytes: 0))
        store._checkInvariants()
    }

    @Test func whenEveryEntryWasReadTheOldestStillMakesRoom() {
        let entry = CachetMemoryStore.accountedSize(keyLength: 1, valueLength: 100)
        let store = Self.store(limit: entry * 3)
        let value = [UInt8](repeating: 1, count: 100)
        for key: UInt8 in 1...3 { store.put(key: [key], value: value) }
        for key: UInt8 in 1...3 { #expect(store.value(forKey: [key]) != nil) }
        store.put(key: [4], value: value)
        // Every mark is cleared in one pass and the oldest goes; the new entry stays.
        #expect(store.value(forKey: [1]) == nil)
        #expect(store.value(forKey: [4]) == value)
        #expect(store.statistics.items == 3 && store.statistics.accountedBytes <= entry * 3)
        #expect(store.statistics.evictions == 1)
        store._checkInvariants()
    }

    @Test func tooLargeChangesNothing() {
        let store = Self.store(limit: 4096)
        store.put(key: [7], value: [1, 2, 3])
        #expect(store.put(key: [7], value: [UInt8](repeating: 0, count: 5000)) == .tooLarge)
        #expect(store.value(forKey: [7]) == [1, 2, 3])
    }

    @Test func emptyValuesLongKeysAndBinaryKeys() {
        let store = Self.store(limit: 1 << 20, shards: 4)
        let long = [UInt8](repeating: 0x61, count: 4096)
        let binary: [UInt8] = [0, 0, 255, 0]
        store.put(key: long, value: [])
        store.put(key: binary, value: [9])
        store.put(key: [0, 0, 255], value: [8])
        #expect(store.value(forKey: long) == [])
        #expect(store.value(forKey: binary) == [9])
        #expect(store.value(forKey: [0, 0, 255]) == [8])
        store._checkInvariants()
    }

    @Test func expiryIsLazyAndSwept() {
        let store = Self.store(limit: 1 << 20)
        store.put(key: [1], value: [1], expiry: 110, now: 100)
        store.put(key: [2], value: [2], expiry: 0, now: 100)
        store.put(key: [3], value: [3], expiry: 105, now: 100)
        #expect(store.value(forKey: [1], now: 109) == [1])
        #expect(store.value(forKey: [1], now: 110) == nil)  // expiry is exclusive
        #expect(store.statistics.expired == 1)
        #expect(store.sweepExpired(now: 106, budget: 100) == 1)
        #expect(store.statistics.items == 1)
        #expect(store.statistics.expired == 2)
        #expect(store.value(forKey: [2], now: 1_000_000) == [2])
        store._checkInvariants()
    }

    @Test func sweepIsIncrementalAndVisitsEveryEntry() {
        let store = Self.store(limit: 1 << 22)
        for i in 0..<1000 { store.put(key: Array("k\(i)".utf8), value: [1], expiry: i % 2 == 0 ? 50 : 0, now: 10) }
        var removed = 0
        for _ in 0..<20 { removed += store.sweepExpired(now: 60, budget: 64) }
        #expect(removed == 500)
        #expect(store.statistics.items == 500)
        store._checkInvariants()
    }

    @Test func replacingAKeyKeepsOneEntry() {
        let store = Self.store(limit: 1 << 20, shards: 2)
        for i in 0..<100 { store.put(key: [42], value: [UInt8](repeating: UInt8(i), count: i)) }
        #expect(store.statistics.items == 1)
        #expect(store.statistics.keyValueBytes == 1 + 99)
        #expect(store.value(forKey: [42]) == [UInt8](repeating: 99, count: 99))
        store._checkInvariants()
    }

    @Test func theLimitHoldsAcrossShards() {
        let limit = 64 * 1024
        let store = Self.store(limit: limit, shards: 16)
        var random = SplitMix64(state: 9)
        for i in 0..<20_000 {
            let value = [UInt8](repeating: 1, count: Int(random.next() % 2000))
            store.put(key: Array("key\(i)".utf8), value: value)
            #expect(store.statistics.accountedBytes <= limit)
        }
        // A value larger than a sixteenth of the limit still fits: the limit is global.
        #expect(store.put(key: [1], value: [UInt8](repeating: 2, count: limit / 2)) == .stored)
        #expect(store.value(forKey: [1])?.count == limit / 2)
        store._checkInvariants()
    }

    @Test func concurrentUseKeepsTheInvariants() {
        let store = Self.store(limit: 256 * 1024, shards: 8)
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            var random = SplitMix64(state: UInt64(worker))
            for _ in 0..<20_000 {
                let key = Array("k\(random.next() % 2000)".utf8)
                switch random.next() % 4 {
                case 0, 1:
                    store.put(key: key, value: [UInt8](repeating: UInt8(worker), count: Int(random.next() % 300)))
                case 2: _ = store.value(forKey: key)
                default: store.remove(key: key)
                }
            }
        }
        store._checkInvariants()
        #expect(store.statistics.accountedBytes <= 256 * 1024)
    }

    @Test func removeAllReportsAndVisits() {
        let store = Self.store(limit: 1 << 20, shards: 4)
        store.put(key: [1], value: [1, 2, 3])
        store.put(key: [2, 2], value: [])
        var visited: [[UInt8]: Int] = [:]
        let removed = store.removeAll { key, length in visited[Array(key)] = length }
        #expect(removed.items == 2 && removed.bytes == 6)
        #expect(visited == [[1]: 3, [2, 2]: 0])
        let statistics = store.statistics
        #expect(statistics.items == 0 && statistics.keyValueBytes == 0 && statistics.accountedBytes == 0)
        store._checkInvariants()
    }
}
