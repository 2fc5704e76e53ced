import CachetNode
import CachetStore
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// STATS as a dictionary.
func stats(_ client: TestSocket) throws -> [String: Any] {
    let reply = try client.roundTrip(.stats)
    return try #require(try JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any])
}

/// Waits until the node's disk queue is empty.
func waitForDiskQueue(_ client: TestSocket) throws {
    for _ in 0..<500 {
        if try stats(client)["disk_queue_depth"] as? Int == 0 { return }
        Thread.sleep(forTimeInterval: 0.01)
    }
    Issue.record("the disk queue did not drain")
}

func value(for key: Int, version: Int, size: Int = 300) -> [UInt8] {
    Array("key \(key) version \(version) ".utf8)
        + [UInt8](repeating: UInt8(truncatingIfNeeded: key &+ version), count: size)
}

@Suite("Node with a disk tier", .dedicatedThreads)
struct NodeDiskTests {
    @Test func contentsSurviveARestart() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        do {
            let node = try NodeProcess(arguments: ["--data-dir", data.path])
            let client = try node.connect()
            for i in 0..<200 {
                #expect(
                    try client.roundTrip(.put(key: Array("k\(i)".utf8), value: value(for: i, version: 0), ttl: 0))
                        .status == .ok
                )
            }
            #expect(node.stop() == 0)
        }
        let node = try NodeProcess(arguments: ["--data-dir", data.path])
        let client = try node.connect()
        for i in 0..<200 {
            #expect(try client.roundTrip(.get(key: Array("k\(i)".utf8))).body == value(for: i, version: 0))
        }
        let counters = try stats(client)
        #expect(counters["disk_items"] as? Int == 200)
        #expect(counters["disk_hits"] as? Int == 200)
        // The disk hits were promoted: reading again is served from memory.
        _ = try client.roundTrip(.get(key: Array("k0".utf8)))
        #expect(try stats(client)["disk_hits"] as? Int == 200)
    }

    @Test func killNineMidStreamServesOnlyValuesThatWereWritten() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        let keys = 100
        do {
            let node = try NodeProcess(arguments: ["--data-dir", data.path])
            let client = try node.connect()
            for i in 0..<keys {
                _ = try client.roundTrip(.put(key: Array("k\(i)".utf8), value: value(for: i, version: 0), ttl: 0))
            }
            try waitForDiskQueue(client)
            // Overwrite every key many times in one stream, and kill the node in the middle of it.
            var stream: [UInt8] = []
            for version in 1...40 {
                for i in 0..<keys {
                    CachetCommand.put(key: Array("k\(i)".utf8), value: value(for: i, version: version), ttl: 0).encode(
                        id: 0,
                        to: &stream
                    )
                }
            }
            try client.send(Array(stream.prefix(stream.count / 2)))
            _ = try client.readResponse()
            kill(node.process.processIdentifier, SIGKILL)
            node.process.waitUntilExit()
        }
        let node = try NodeProcess(arguments: ["--data-dir", data.path])
        let client = try node.connect()
        for i in 0..<keys {
            // Keys overwritten just before the crash are journaled and dropped at start-up: a miss.
            let reply = try client.roundTrip(.get(key: Array("k\(i)".utf8)))
            #expect(reply.status == .ok || reply.status == .notFound)
            guard reply.status == .ok else { continue }
            let written = (0...40).map { value(for: i, version: $0) }
            #expect(written.contains(reply.body), "k\(i) holds a value never written")
        }
        #expect(try stats(client)["disk_corrupt"] as? Int == 0)
    }

    @Test func aFlippedByteIsAMissNotWrongData() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        do {
            let node = try NodeProcess(arguments: ["--data-dir", data.path])
            _ = try node.connect().roundTrip(
                .put(key: Array("victim".utf8), value: value(for: 1, version: 1, size: 5000), ttl: 0)
            )
            #expect(node.stop() == 0)
        }
        let enumerator = FileManager.default.enumerator(atPath: data.path)
        var file: String?
        while file == nil, let name = enumerator?.nextObject() as? String {
            if (name as NSString).lastPathComponent.utf8.count == 64 { file = data.appending(name) }
        }
        let path = try #require(file)
        var bytes = try #require(FileManager.default.contents(atPath: path))
        bytes[bytes.count / 2] ^= 0x01
        _ = FileManager.default.createFile(atPath: path, contents: bytes)
        let node = try NodeProcess(arguments: ["--data-dir", data.path])
        let client = try node.connect()
        #expect(try client.roundTrip(.get(key: Array("victim".utf8))).status == .notFound)
        #expect(try stats(client)["disk_corrupt"] as? Int == 1)
    }

    @Test func loweringTheDiskLimitTrimsAtStart() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        do {
            let node = try NodeProcess(arguments: ["--data-dir", data.path, "--compression-level", "0"])
            let client = try node.connect()
            for i in 0..<100 {
                _ = try client.roundTrip(
                    .put(key: Array("k\(i)".utf8), value: [UInt8](repeating: UInt8(i), count: 1000), ttl: 0)
                )
            }
            #expect(node.stop() == 0)
        }
        // --disk-limit is the whole footprint: 20 KiB for entries on top of the smallest journal's files.
        let footprint =
            CachetDiskConfiguration.minimumFootprint(standInLog: false) - CachetDiskConfiguration.minimumEntryBytes
            + 20 * 1024
        let node = try NodeProcess(arguments: ["--data-dir", data.path, "--disk-limit", "\(footprint)"])
        let counters = try stats(try node.connect())
        #expect((counters["disk_bytes"] as? Int ?? .max) <= 20 * 1024)
        #expect((counters["disk_items"] as? Int ?? 0) > 10)
        #expect(counters["disk_limit"] as? Int == footprint)
        #expect(counters["disk_entry_limit"] as? Int == 20 * 1024)
    }

    /// `--disk-limit` bounds everything the tier keeps in its directory: incompressible entries past the
    /// limit leave the directory within it, journal files included (it used to hold 14.1 MB under 8 MiB).
    @Test func theDiskLimitBoundsTheWholeDataDirectory() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        let node = try NodeProcess(arguments: [
            "--data-dir", data.path, "--disk-limit", "8MiB", "--memory-limit", "1MiB",
        ])
        let client = try node.connect()
        var random = SplitMix64(state: 5)
        for key in 0..<120 {
            let value = (0..<(100 << 10) / 8).flatMap { _ in withUnsafeBytes(of: random.next()) { Array($0) } }
            #expect(try client.roundTrip(.put(key: Array("big\(key)".utf8), value: value, ttl: 0)).status == .ok)
        }
        try waitForDiskQueue(client)
        var total = 0
        let enumerator = FileManager.default.enumerator(atPath: data.path)
        while let name = enumerator?.nextObject() as? String {
            let attributes = try? FileManager.default.attributesOfItem(atPath: data.appending(name))
            if attributes?[.type] as? FileAttributeType == .typeRegular { total += attributes?[.size] as? Int ?? 0 }
        }
        #expect(total <= 8 << 20, "the data directory holds \(total) bytes under --disk-limit 8MiB")
        #expect(
            (try stats(client)["disk_evictions"] as? Int ?? 0) > 0,
            "nothing was evicted: the test wrote too little"
        )
    }

    @Test func aDiskLimitTooSmallForTheJournalIsRefusedAtStartWithTheMinimum() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        let minimum = CachetDiskConfiguration.minimumFootprint(standInLog: false)
        do {
            _ = try NodeProcess(arguments: ["--data-dir", data.path, "--disk-limit", "256KiB"], timeout: 10)
            Issue.record("a node started with --disk-limit 256KiB")
        } catch {
            #expect("\(error)".contains("is too small for the disk tier"), "\(error)")
            #expect("\(error)".contains("take \(minimum) bytes"), "\(error)")
        }
    }

    /// The journal is sized from `--disk-limit`: a small tier gets small journals (a 2 MiB tier used to be
    /// refused, its two journal files taking 5.5 MiB whatever the limit), the default 1 GiB the full ones.
    @Test func theJournalIsSizedFromTheDiskLimit() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        let small = try NodeProcess(arguments: ["--data-dir", data.appending("small"), "--disk-limit", "2MiB"])
        let client = try small.connect()
        for key in 0..<50 {
            #expect(try client.roundTrip(.put(key: Array("k\(key)".utf8), value: [1, 2, 3], ttl: 0)).status == .ok)
        }
        try waitForDiskQueue(client)
        let sized = try #require(
            CachetDiskConfiguration.sized(footprint: 2 << 20, directory: "", standInLog: false)
        )
        let counters = try stats(client)
        #expect(counters["disk_limit"] as? Int == 2 << 20)
        #expect(counters["disk_entry_limit"] as? Int == sized.limit)
        #expect(sized.journalCapacity == CachetDiskConfiguration.minimumJournalCapacity)
        var journal = 0
        for name in ["journal-0", "journal-1"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: data.appending("small/" + name))
            journal += attributes[.size] as? Int ?? 0
        }
        #expect(journal == sized.journalBytes && journal < 512 << 10, "journal files of \(journal) bytes")
        #expect(small.stop() == 0)
        let large = try #require(CachetDiskConfiguration.sized(footprint: 1 << 30, directory: "", standInLog: true))
        #expect(large.journalCapacity == CachetDiskConfiguration.defaultJournalCapacity)
        #expect(large.standInLogBytes == 4 << 20)
        #expect(large.footprint(clusterMember: true) == 1 << 30)
    }

    /// A member of a cluster also keeps its stand-in log within `--disk-limit`, at its budget: a limit that
    /// leaves the entries nothing once the journal and that budget are counted is refused with the minimum.
    @Test func aClusterMembersDiskLimitCountsTheStandInLog() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        let file = data.appending("cluster.json")
        try Data(
            "{\"members\": [{\"id\": \"n1\", \"host\": \"127.0.0.1\", \"port\": 17431}, {\"id\": \"n2\", \"host\": \"127.0.0.1\", \"port\": 17432}]}"
                .utf8
        ).write(to: URL(fileURLWithPath: file))
        let minimum = CachetDiskConfiguration.minimumFootprint(standInLog: true)
        #expect(minimum > CachetDiskConfiguration.minimumFootprint(standInLog: false))
        do {
            // Enough for a node alone, not for a member.
            _ = try NodeProcess(
                arguments: [
                    "--cluster", file, "--node-id", "n1", "--data-dir", data.appending("d"), "--disk-limit", "512KiB",
                ],
                timeout: 10
            )
            Issue.record("a member started with --disk-limit 512KiB")
        } catch {
            #expect("\(error)".contains("the stand-in log"), "\(error)")
            #expect("\(error)".contains("take \(minimum) bytes"), "\(error)")
        }
        let node = try NodeProcess(
            arguments: [
                "--cluster", file, "--node-id", "n1", "--data-dir", data.appending("d"), "--disk-limit", "16MiB",
            ]
        )
        let stats = try node.stats()
        #expect(stats["disk_limit"] as? Int == 16 << 20, "the footprint, stand-in log included")
        let sized = try #require(CachetDiskConfiguration.sized(footprint: 16 << 20, directory: "", standInLog: true))
        #expect(stats["disk_entry_limit"] as? Int == sized.limit)
        #expect(sized.limit == (16 << 20) - sized.journalBytes - sized.standInLogBytes && sized.standInLogBytes > 0)
    }

    @Test func ttlIsHonouredAfterARestart() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        do {
            let node = try NodeProcess(arguments: ["--data-dir", data.path])
            let client = try node.connect()
            _ = try client.roundTrip(.put(key: Array("short".utf8), value: [1], ttl: 1))
            _ = try client.roundTrip(.put(key: Array("long".utf8), value: [2], ttl: 3600))
            #expect(node.stop() == 0)
        }
        Thread.sleep(forTimeInterval: 2.1)
        let node = try NodeProcess(arguments: ["--data-dir", data.path])
        let client = try node.connect()
        #expect(try client.roundTrip(.get(key: Array("short".utf8))).status == .notFound)
        #expect(try client.roundTrip(.get(key: Array("long".utf8))).body == [2])
    }

    @Test func aSecondNodeOnTheSameDataDirectoryIsRefused() throws {
        let data = TemporaryDirectory(prefix: "cachet-node-data")
        let first = try NodeProcess(arguments: ["--data-dir", data.path])
        do {
            _ = try NodeProcess(arguments: ["--data-dir", data.path], timeout: 5)
            Issue.record("the second node started")
        } catch {
            let said = "\(error)"
            #expect(said.contains("is in use by another cachet-node (pid \(first.process.processIdentifier)"))
            // Said once, and not as a usage error: the flags are right, the directory is taken.
            #expect(said.components(separatedBy: "is in use by another cachet-node").count == 2, "\(said)")
            #expect(!said.contains("Usage:"), "\(said)")
        }
    }

    @Test func valuesLargerThanMemoryLiveOnDisk() throws {
        let directory = TemporaryDirectory(prefix: "cachet-disk")
        try withNode({
            $0.memoryLimit = 1 << 20
            $0.disk = CachetDiskConfiguration(directory: directory.path, limit: 8 << 20)
        }) { server, port in
            let client = try TestSocket(port: port)
            let big = value(for: 1, version: 1, size: 3 << 20)
            #expect(try client.roundTrip(.put(key: Array("big".utf8), value: big, ttl: 0)).status == .ok)
            #expect(try client.roundTrip(.get(key: Array("big".utf8))).body == big)
            #expect(server.memory.statistics.items == 0)
            let tooBig = try client.roundTrip(
                .put(key: Array("huge".utf8), value: [UInt8](repeating: 1, count: 9 << 20), ttl: 0)
            )
            #expect(tooBig.status == .tooLarge)
            let footprint = (8 << 20) + CachetDiskConfiguration(directory: directory.path, limit: 0).journalBytes
            #expect(
                tooBig.bodyText
                    == "entry of 9437188 bytes does not fit --memory-limit 1048576 nor --disk-limit \(footprint) "
                    + "(at most 8388244 bytes of key and value)"
            )
            // Key and value fit the limit but the entry file's 44-byte header of a value in blocks, its block
            // table (8 bytes a block, counted for the largest value the limit could hold) and its 52-byte
            // record in the index file do not: refused, not lost.
            let almost = [UInt8](repeating: 7, count: (8 << 20) - 4 - 10)
            let refused = try client.roundTrip(.put(key: Array("near".utf8), value: almost, ttl: 0))
            #expect(refused.status == .tooLarge)
            #expect(try client.roundTrip(.get(key: Array("near".utf8))).status == .notFound)
            let fits = [UInt8](repeating: 7, count: (8 << 20) - 4 - 44 - (33 * 8 + 4) - 52)
            #expect(try client.roundTrip(.put(key: Array("near".utf8), value: fits, ttl: 0)).status == .ok)
            #expect(try client.roundTrip(.get(key: Array("near".utf8))).body == fits)
        }
    }

    @Test func theSweepDeletesExpiredDiskEntriesNobodyReads() throws {
        let directory = TemporaryDirectory(prefix: "cachet-disk")
        try withNode({
            $0.sweepInterval = 0.1
            $0.disk = CachetDiskConfiguration(directory: directory.path, limit: 8 << 20)
        }) { _, port in
            let client = try TestSocket(port: port)
            for key in 0..<20 {
                let ttl: UInt32 = key < 15 ? 1 : 0
                _ = try client.roundTrip(.put(key: Array("k\(key)".utf8), value: value(for: key, version: 1), ttl: ttl))
            }
            try waitForDiskQueue(client)
            // A TTL of 1 s can run out within milliseconds (the clock counts whole seconds), so by now the
            // sweep may already have removed some: every entry is on disk or counted as swept.
            let written = try stats(client)
            #expect(
                (written["disk_items"] as? Int ?? 0) + (written["disk_expired"] as? Int ?? 0) == 20,
                "\(written)"
            )
            var reply = try stats(client)
            for _ in 0..<1500 where reply["disk_items"] as? Int != 5 {
                Thread.sleep(forTimeInterval: 0.01)
                reply = try stats(client)
            }
            #expect(reply["disk_items"] as? Int == 5)
            #expect(reply["disk_expired"] as? Int == 15)
            let files = try FileManager.default.subpathsOfDirectory(atPath: directory.path)
                .filter { $0.split(separator: "/").last?.count == 64 }
            #expect(files.count == 5)
        }
    }

    @Test func pipelinedReadsFromDiskComeBackInOrder() throws {
        let directory = TemporaryDirectory(prefix: "cachet-disk")
        try withNode({
            $0.memoryLimit = 1 << 20
            $0.disk = CachetDiskConfiguration(directory: directory.path, limit: 256 << 20)
        }) { _, port in
            let client = try TestSocket(port: port)
            // 2,000 values of 4 KiB: far more than the 1 MiB memory tier holds.
            var puts: [UInt8] = []
            for i in 0..<2000 {
                CachetCommand.put(key: Array("k\(i)".utf8), value: value(for: i, version: 0, size: 4096), ttl: 0)
                    .encode(id: UInt32(i), to: &puts)
            }
            try client.send(puts)
            for i in 0..<2000 { #expect(try client.readResponse().id == UInt32(i)) }
            var gets: [UInt8] = []
            for i in 0..<2000 { CachetCommand.get(key: Array("k\(i)".utf8)).encode(id: UInt32(i), to: &gets) }
            CachetCommand.get(key: Array("absent".utf8)).encode(id: 5000, to: &gets)
            try client.send(gets)
            for i in 0..<2000 {
                let reply = try client.readResponse()
                #expect(reply.id == UInt32(i))
                #expect(reply.body == value(for: i, version: 0, size: 4096))
            }
            #expect(try client.readResponse() == CachetResponse(opcode: .get, status: .notFound, id: 5000))
            let counters = try stats(client)
            #expect((counters["disk_hits"] as? Int ?? 0) > 1000)
        }
    }

    @Test func clearEmptiesBothTiersAndCountsEachEntryOnce() throws {
        let directory = TemporaryDirectory(prefix: "cachet-disk")
        try withNode({ $0.disk = CachetDiskConfiguration(directory: directory.path, limit: 64 << 20) }) { _, port in
            let client = try TestSocket(port: port)
            _ = try client.roundTrip(.put(key: Array("a".utf8), value: Array("12345".utf8), ttl: 0))
            _ = try client.roundTrip(.put(key: Array("bb".utf8), value: Array("678".utf8), ttl: 0))
            try waitForDiskQueue(client)
            let reply = try client.roundTrip(.clear)
            #expect(try CachetClearResult(decoding: reply.body) == CachetClearResult(items: 2, bytes: 11))
            #expect(try client.roundTrip(.get(key: Array("a".utf8))).status == .notFound)
            let counters = try stats(client)
            #expect(counters["disk_items"] as? Int == 0)
            #expect(counters["items"] as? Int == 0)
        }
    }

    @Test func aClearBehindQueuedWritesCountsEachEntryOnce() throws {
        // PUTs pipelined with the CLEAR are still queued for the disk when the CLEAR empties memory: the
        // disk counts them once written, so memory must not count them as its own too.
        let directory = TemporaryDirectory(prefix: "cachet-disk")
        try withNode({ $0.disk = CachetDiskConfiguration(directory: directory.path, limit: 64 << 20) }) { _, port in
            let client = try TestSocket(port: port)
            let value = [UInt8](repeating: 7, count: 100)
            var stream: [UInt8] = []
            var bytes = 0
            for i in 0..<2000 {
                let key = Array("k\(i)".utf8)
                bytes += key.count + value.count
                CachetCommand.put(key: key, value: value, ttl: 0).encode(id: UInt32(i), to: &stream)
            }
            CachetCommand.clear.encode(id: 9999, to: &stream)
            try client.send(stream)
            for i in 0..<2000 { #expect(try client.readResponse().status == .ok, "PUT \(i)") }
            let reply = try client.readResponse()
            #expect(reply.id == 9999)
            #expect(try CachetClearResult(decoding: reply.body) == CachetClearResult(items: 2000, bytes: UInt64(bytes)))
            try waitForDiskQueue(client)
            #expect(try stats(client)["disk_items"] as? Int == 0)
        }
    }

    @Test func deleteRemovesFromBothTiers() throws {
        let directory = TemporaryDirectory(prefix: "cachet-disk")
        try withNode({
            $0.memoryLimit = 1 << 20
            $0.disk = CachetDiskConfiguration(directory: directory.path, limit: 64 << 20)
        }) { server, port in
            let client = try TestSocket(port: port)
            _ = try client.roundTrip(.put(key: Array("d".utf8), value: [1], ttl: 0))
            try waitForDiskQueue(client)
            #expect(try client.roundTrip(.delete(key: Array("d".utf8))).status == .ok)
            #expect(try client.roundTrip(.get(key: Array("d".utf8))).status == .notFound)
            try waitForDiskQueue(client)
            #expect(try stats(client)["disk_items"] as? Int == 0)
            _ = server
        }
    }
}

@Suite("Node: a full disk queue makes PUTs wait", .dedicatedThreads)
struct NodeDiskQueueTests {
    @Test func pipelinedPutsWaitForRoomAndNoneIsLost() throws {
        let directory = TemporaryDirectory(prefix: "cachet-disk")
        try withNode({
            $0.memoryLimit = 1 << 20
            $0.disk = CachetDiskConfiguration(directory: directory.path, limit: 256 << 20, queueCapacity: 2)
        }) { _, port in
            let client = try TestSocket(port: port)
            // 1,500 PUTs of 2 KiB through a disk queue that holds two writes: most PUTs wait for room.
            var puts: [UInt8] = []
            for i in 0..<1500 {
                CachetCommand.put(key: Array("k\(i)".utf8), value: value(for: i, version: 7, size: 2048), ttl: 0)
                    .encode(id: UInt32(i), to: &puts)
            }
            try client.send(puts)
            for i in 0..<1500 {
                let reply = try client.readResponse()
                #expect(reply.id == UInt32(i) && reply.status == .ok)
            }
            try waitForDiskQueue(client)
            // The memory tier holds a few hundred of them; every one must come back, most from disk.
            for i in stride(from: 0, to: 1500, by: 7) {
                #expect(
                    try client.roundTrip(.get(key: Array("k\(i)".utf8))).body == value(for: i, version: 7, size: 2048)
                )
            }
            #expect(try stats(client)["disk_items"] as? Int == 1500)
        }
    }
}
