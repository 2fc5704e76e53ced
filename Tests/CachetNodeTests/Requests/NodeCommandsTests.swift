import CachetIO
import CachetLocking
import CachetStore
import CachetTestSupport
import Dispatch
import Logging
import Testing

@testable import CachetNode

/// The command layer alone: keys, values and TTLs in, outcomes out, with no frame in sight (what a second
/// protocol's front end would call).
@Suite("Node commands (no wire format)")
struct NodeCommandsTests {
    /// Commands over a memory tier of `memoryLimit` bytes and, with `directory`, a disk tier there.
    static func commands(memoryLimit: Int = 8 << 20, directory: String? = nil) throws -> NodeCommands {
        let watches = NodeWatchHub(ringLimit: 1 << 20, retain: 60, sendLimit: 1 << 20)
        let disk = try directory.flatMap { directory in
            try DiskTier.open(
                CachetDiskConfiguration(directory: directory, limit: 16 << 20),
                clusterMember: false,
                watches: watches,
                logger: Logger(label: "test")
            )
        }
        return NodeCommands(
            store: CachetMemoryStore(configuration: CachetMemoryStoreConfiguration(memoryLimit: memoryLimit)),
            disk: disk,
            largeValueThreshold: 8 << 20,
            counters: RequestCounters(),
            leases: NodeLeases(lifetime: 10),
            watches: watches,
            watchView: WatchIndexView(),
            casSource: CachetCASSource()
        )
    }

    /// The value memory hands a look-up, or nil for a miss.
    static func lookUp(_ commands: NodeCommands, _ key: String, now: UInt32 = 1_000) -> (String, UInt32)? {
        var found: (String, UInt32)?
        let lookup = Array(key.utf8).withUnsafeBytes { key in
            commands.lookUp(key, now: now) { value, expiry in
                found = (String(decoding: value, as: UTF8.self), expiry)
                return true
            }
        }
        if case .hit = lookup { return found }
        return nil
    }

    static func put(_ commands: NodeCommands, _ key: String, _ value: String, ttl: UInt32 = 0)
        -> NodeCommands.PutOutcome
    {
        Array(key.utf8).withUnsafeBytes { key in
            Array(value.utf8).withUnsafeBytes { value in commands.put(key: key, value: value, ttl: ttl, now: 1_000) }
        }
    }

    @Test func aPutIsFoundWithItsExpiryAndADeleteRemovesIt() throws {
        let commands = try Self.commands()
        guard case .stored = Self.put(commands, "user:1", "ada", ttl: 60) else {
            Issue.record("the PUT was not stored")
            return
        }
        let found = try #require(Self.lookUp(commands, "user:1"))
        #expect(found.0 == "ada")
        #expect(found.1 == 1_060)
        let deleted = Array("user:1".utf8).withUnsafeBytes { commands.delete($0, now: 1_000) }
        guard case .deleted = deleted else {
            Issue.record("expected deleted, got \(deleted)")
            return
        }
        #expect(Self.lookUp(commands, "user:1") == nil)
        let again = Array("user:1".utf8).withUnsafeBytes { commands.delete($0, now: 1_000) }
        guard case .notFound = again else {
            Issue.record("expected notFound, got \(again)")
            return
        }
        #expect(commands.counters.puts.load(ordering: .relaxed) == 1)
        #expect(commands.counters.hits.load(ordering: .relaxed) == 1)
        #expect(commands.counters.gets.load(ordering: .relaxed) == 2)
    }

    @Test func aLookUpWithNoRoomForTheReplyIsNotCounted() throws {
        let commands = try Self.commands()
        _ = Self.put(commands, "k", "v")
        let lookup = Array("k".utf8).withUnsafeBytes { key in commands.lookUp(key, now: 1_000) { _, _ in false } }
        guard case .noRoom = lookup else {
            Issue.record("expected noRoom, got \(lookup)")
            return
        }
        #expect(commands.counters.gets.load(ordering: .relaxed) == 0)
    }

    @Test func aValueTooLargeForMemoryWithoutADiskTierIsRefusedSayingWhy() throws {
        let commands = try Self.commands(memoryLimit: 64 << 10)
        let outcome = Self.put(commands, "big", String(repeating: "x", count: 200 << 10))
        guard case .tooLarge(let message) = outcome else {
            Issue.record("expected tooLarge, got \(outcome)")
            return
        }
        #expect(message.contains("--memory-limit"))
        #expect(Self.lookUp(commands, "big") == nil)
    }

    @Test func aMissThatTheDiskTierMayHoldGoesThereAndAPromotionKeepsIt() throws {
        let directory = TemporaryDirectory(prefix: "cachet-commands")
        let commands = try Self.commands(directory: directory.path)
        _ = Self.put(commands, "k", "on disk")
        commands.disk?.worker.drain()
        _ = Array("k".utf8).withUnsafeBytes { commands.store.remove(key: $0, now: 1_000) }
        #expect(Self.lookUp(commands, "k") == nil)
        #expect(Array("k".utf8).withUnsafeBytes { commands.afterMemoryMiss($0, now: 1_000) })
        #expect(!Array("absent".utf8).withUnsafeBytes { commands.afterMemoryMiss($0, now: 1_000) })
        let read = CachetLock<CachetDiskEntry?>(nil)
        let done = DispatchSemaphore(value: 0)
        commands.disk?.worker.get(key: Array("k".utf8), now: 1_000) { entry in
            read.withLock { $0 = entry }
            done.signal()
        }
        done.wait()
        let entry = try #require(read.withLock { $0 })
        Array("k".utf8).withUnsafeBytes { commands.promote($0, entry, now: 1_000) }
        #expect(Self.lookUp(commands, "k")?.0 == "on disk")
        #expect(commands.counters.diskHits.load(ordering: .relaxed) == 1)
    }

    @Test func aClearWithADiskTierWaitsForItAndCountsWhatOnlyMemoryHeld() throws {
        let directory = TemporaryDirectory(prefix: "cachet-commands")
        let withDisk = try Self.commands(directory: directory.path)
        _ = Self.put(withDisk, "a", "1")
        guard case .waitingForDisk = withDisk.clear(prefixes: []) else {
            Issue.record("a CLEAR on a node with a disk tier must wait for it")
            return
        }
        #expect(Self.lookUp(withDisk, "a") == nil)

        let memoryOnly = try Self.commands()
        _ = Self.put(memoryOnly, "user:1", "1")
        _ = Self.put(memoryOnly, "user:2", "2")
        _ = Self.put(memoryOnly, "job:1", "3")
        let outcome = memoryOnly.clear(prefixes: [Array("user:".utf8)])
        guard case .cleared(let items, let bytes) = outcome else {
            Issue.record("expected cleared, got \(outcome)")
            return
        }
        #expect(items == 2)
        #expect(bytes == 14)
        #expect(Self.lookUp(memoryOnly, "job:1")?.0 == "3")
    }

    @Test func aLeaseIsCompletedOnceAndAnyOtherWriteEndsIt() throws {
        let commands = try Self.commands()
        let key = Array("page".utf8)
        let grant = key.withUnsafeBytes { commands.acquireLease($0) }
        guard case .granted(let token) = grant else {
            Issue.record("expected a lease, got \(grant)")
            return
        }
        #expect(key.withUnsafeBytes { commands.acquireLease($0) } == .held)
        let stored = key.withUnsafeBytes { key in commands.completeLease(key, token: token) { true } }
        #expect(stored == true)
        let twice = key.withUnsafeBytes { key in commands.completeLease(key, token: token) { true } }
        #expect(twice == nil)

        guard case .granted(let second) = key.withUnsafeBytes({ commands.acquireLease($0) }) else {
            Issue.record("the key must be leasable again")
            return
        }
        _ = Self.put(commands, "page", "written by another")
        let late = key.withUnsafeBytes { key in commands.completeLease(key, token: second) { true } }
        #expect(late == nil)
    }

    @Test func anExpiryIsSaturating() {
        #expect(NodeCommands.expiry(ttl: 0, now: 1_000) == 0)
        #expect(NodeCommands.expiry(ttl: 60, now: 1_000) == 1_060)
        #expect(NodeCommands.expiry(ttl: .max, now: 1_000) == .max)
    }
}
