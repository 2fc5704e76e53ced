import Dispatch
import Testing

@testable import CachetStore

@Suite("Memory tier: the pool of large blocks")
struct LargeBlockPoolTests {
    @Test func smallRequestsKeepTheirSize() {
        for size in [1, 34, 160, 4096, LargeBlockPool.minimumBlockSize - 1] {
            #expect(LargeBlockPool.blockSize(for: size) == size)
        }
    }

    @Test(arguments: [65_536, 65_537, 100_034, 131_071, 131_072, 1_000_050, 1_048_576, 1_048_577, 67_108_865])
    func largeRequestsRoundUpToAClassAtMostAnEighthLarger(size: Int) {
        let block = LargeBlockPool.blockSize(for: size)
        #expect(block >= size)
        #expect(block - size <= size / 8)
        #expect(block % 4096 == 0)
        // A class size is its own class.
        #expect(LargeBlockPool.blockSize(for: block) == block)
    }

    @Test func classesGrowWithTheRequest() {
        var previous = 0
        var size = LargeBlockPool.minimumBlockSize
        while size < 64 << 20 {
            let block = LargeBlockPool.blockSize(for: size)
            #expect(block >= previous)
            previous = block
            size += 7_919
        }
        // Eight classes per power of two: 1 MiB to 2 MiB in steps of 128 KiB.
        #expect(LargeBlockPool.blockSize(for: (1 << 20) + 1) == (1 << 20) + (128 << 10))
        #expect(LargeBlockPool.blockSize(for: 1_000_050) == 1 << 20)
    }

    @Test func aFreedLargeBlockIsHandedOutAgainForItsClass() {
        let pool = LargeBlockPool(limit: 8 << 20)
        let size = LargeBlockPool.blockSize(for: 1_000_000)
        let block = pool.allocate(size: size)
        pool.release(block, size: size)
        #expect(pool.pooledBytes == size)
        // Another class does not get it.
        let other = LargeBlockPool.blockSize(for: 200_000)
        let otherBlock = pool.allocate(size: other)
        #expect(otherBlock != block)
        #expect(pool.pooledBytes == size)
        // The same class does, and it is no longer pooled.
        #expect(pool.allocate(size: size) == block)
        #expect(pool.pooledBytes == 0)
        pool.release(block, size: size)
        pool.release(otherBlock, size: other)
        #expect(pool.pooledBytes == size + other)
    }

    @Test func thePoolKeepsNoMoreThanItsLimit() {
        let size = LargeBlockPool.blockSize(for: 300_000)
        let pool = LargeBlockPool(limit: 2 * size + size / 2)
        let blocks = (0..<4).map { _ in pool.allocate(size: size) }
        for block in blocks { pool.release(block, size: size) }
        #expect(pool.pooledBytes == 2 * size)
        let none = LargeBlockPool(limit: 0)
        none.release(none.allocate(size: size), size: size)
        #expect(none.pooledBytes == 0)
    }

    @Test func blocksOfOtherClassesMakeRoomForTheNewest() {
        let small = LargeBlockPool.blockSize(for: 100_000)
        let large = LargeBlockPool.blockSize(for: 1_000_000)
        let limit = large + small + small / 2
        let pool = LargeBlockPool(limit: limit)
        let smalls = (0..<3).map { _ in pool.allocate(size: small) }
        for block in smalls { pool.release(block, size: small) }
        #expect(pool.pooledBytes == 3 * small)
        // A large block pushes out as many small ones as it needs room for, and is kept.
        let block = pool.allocate(size: large)
        pool.release(block, size: large)
        #expect(pool.pooledBytes == large + small)
        #expect(pool.allocate(size: large) == block)
        pool.release(block, size: large)
        // A block larger than the whole limit is never kept and pushes nothing out.
        let huge = LargeBlockPool.blockSize(for: 8 << 20)
        let before = pool.pooledBytes
        pool.release(pool.allocate(size: huge), size: huge)
        #expect(pool.pooledBytes == before)
    }

    @Test func smallBlocksAreNeverPooled() {
        let pool = LargeBlockPool(limit: 8 << 20)
        pool.release(pool.allocate(size: 4096), size: 4096)
        #expect(pool.pooledBytes == 0)
    }

    @Test func threadsShareOnePool() {
        let pool = LargeBlockPool(limit: 4 << 20)
        let sizes = [70_000, 300_000, 1_000_000].map(LargeBlockPool.blockSize(for:))
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for round in 0..<500 {
                let size = sizes[(thread + round) % sizes.count]
                let block = pool.allocate(size: size)
                // Touch both ends: a block handed to two owners at once would be caught by the check below.
                block.storeBytes(of: UInt64(thread), as: UInt64.self)
                block.storeBytes(of: UInt64(thread), toByteOffset: size - 8, as: UInt64.self)
                #expect(block.load(as: UInt64.self) == UInt64(thread))
                #expect(block.load(fromByteOffset: size - 8, as: UInt64.self) == UInt64(thread))
                pool.release(block, size: size)
            }
        }
        #expect(pool.pooledBytes <= pool.limit)
    }

    @Test func theMemoryTierReusesTheBlockOfARemovedLargeValue() throws {
        let store = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: 64 << 20))
        let key = Array("big".utf8)
        let block = LargeBlockPool.blockSize(for: MemoryEntry.headerSize + key.count + 1_000_000)
        store.put(key: key, value: [UInt8](repeating: 1, count: 1_000_000))
        #expect(store.statistics.pooledBytes == 0)
        // A replacement frees the old block before the new one is taken, so the new one is the old one.
        store.put(key: key, value: [UInt8](repeating: 2, count: 1_000_000))
        #expect(store.statistics.pooledBytes == 0)
        #expect(store.value(forKey: key) == [UInt8](repeating: 2, count: 1_000_000))
        // A removed entry's block is kept...
        #expect(store.remove(key: key))
        #expect(store.statistics.pooledBytes == block)
        // ...taken by the next large entry of its class, which reads back whole...
        let pending = try #require(key.withUnsafeBytes { store.reservePut(key: $0, valueLength: 1_000_000, expiry: 0) })
        #expect(store.statistics.pooledBytes == 0)
        pending.value.initializeMemory(as: UInt8.self, repeating: 3)
        store.commit(pending, now: 1)
        #expect(store.value(forKey: key) == [UInt8](repeating: 3, count: 1_000_000))
        // ...and not by small entries.
        store.put(key: Array("small".utf8), value: [1, 2, 3])
        #expect(store.remove(key: Array("small".utf8)))
        #expect(store.statistics.pooledBytes == 0)
        // The limit counts the class size, not the bytes asked for.
        let accounted = CachetMemoryStore.accountedSize(keyLength: 3, valueLength: 1_000_000)
        #expect(store.statistics.accountedBytes == accounted && accounted > block)
        store._checkInvariants()
    }

    @Test func clearingKeepsAtMostTheLimit() {
        let limit = 32 << 20
        let store = CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: limit))
        for index in 0..<20 {
            store.put(key: Array("k\(index)".utf8), value: [UInt8](repeating: 0, count: 500_000))
        }
        _ = store.removeAll()
        #expect(store.statistics.items == 0)
        #expect(store.statistics.pooledBytes > 0)
        #expect(store.statistics.pooledBytes <= LargeBlockPool.defaultLimit(memoryLimit: limit))
    }
}
