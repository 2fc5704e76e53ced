import CachetStore
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Values sent in parts (`Protocol/PROTOCOL.md`, "PUT in parts") on real node processes: stored once the
/// last part arrives and seen whole or not at all, larger than the memory tier and than one frame, read back
/// by range across blocks; an upload cut off at any stage (the connection closed between parts or inside
/// one, no part for a while, a part out of order) is freed and never visible; kill -9 during an upload or
/// right after it never shows a corrupt or mixed value; forwarded in a cluster.
@Suite("Node: values sent in parts", .dedicatedThreads)
struct NodeUploadTests {
    static let key = Array("video:42".utf8)

    static func value(_ count: Int, seed: Int = 1) -> [UInt8] {
        PatternBytes.make(count: count, step: 131, seed: seed)
    }

    /// A PUT with the part flag, encoded by hand as the specification says.
    static func part(
        _ key: [UInt8] = key,
        upload: UInt64,
        total: Int,
        offset: Int,
        _ bytes: ArraySlice<UInt8>,
        ttl: UInt32 = 0,
        id: UInt32 = 1
    ) -> [UInt8] {
        let value = CachetUploadPart.encodeHeader(upload: upload, total: UInt64(total), offset: UInt64(offset)) + bytes
        return CachetCommand.put(key: key, value: value, ttl: ttl).encoded(id: id, flags: .part)
    }

    /// Sends `value` in parts of `size` bytes, one reply at a time; returns the statuses.
    static func upload(
        _ value: [UInt8],
        key: [UInt8] = key,
        upload: UInt64 = 77,
        size: Int,
        on socket: TestSocket,
        stopBefore: Int? = nil
    ) throws -> [CachetStatus] {
        var statuses: [CachetStatus] = []
        var offset = 0
        repeat {
            if let stopBefore, offset >= stopBefore { break }
            let end = min(value.count, offset + size)
            try socket.send(part(key, upload: upload, total: value.count, offset: offset, value[offset..<end]))
            statuses.append(try socket.readResponse().status)
            offset = end
        } while offset < value.count
        return statuses
    }

    static func rangedGet(_ range: CachetValueRange, on socket: TestSocket, key: [UInt8] = key) throws -> CachetResponse
    {
        try socket.roundTrip(.rangedGet(key: key, range: range))
    }

    /// Reads a whole value by ranges of `size`, checking that every reply carries the same length and tag.
    static func readByRanges(size: Int, on socket: TestSocket, key: [UInt8] = key) throws -> [UInt8]? {
        var bytes: [UInt8] = []
        var tag: UInt64?
        while true {
            let reply = try rangedGet(
                CachetValueRange(offset: UInt64(bytes.count), length: UInt64(size)),
                on: socket,
                key: key
            )
            guard reply.status == .ok, let (total, replyTag, start) = CachetValueRange.decodeReply(reply.body) else {
                return nil
            }
            #expect(tag == nil || tag == replyTag)
            tag = replyTag
            bytes += reply.body[start...]
            if bytes.count >= Int(total) { return bytes }
        }
    }

    static func uploadsDirectory(_ directory: TemporaryDirectory) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory.appending("uploads"))) ?? []
    }

    @Test func aValueLargerThanAFrameAndTheMemoryTierIsStoredInPartsAndReadByRange() throws {
        let directory = TemporaryDirectory(prefix: "cachet-upload")
        defer { directory.remove() }
        let arguments = [
            "--data-dir", directory.path, "--disk-limit", "64MiB", "--max-frame", "1MiB", "--memory-limit", "2MiB",
        ]
        var node = try NodeProcess(arguments: arguments)
        var socket = try node.connect()
        let old = Array("the older value".utf8)
        #expect(try socket.roundTrip(.put(key: Self.key, value: old, ttl: 0)).status == .ok)
        let value = Self.value(5_000_000)
        // Parts of a size that never lines up with the 256 KiB blocks; a reader between every two parts.
        let reader = try node.connect()
        var offset = 0
        while offset < value.count {
            let end = min(value.count, offset + 700_001)
            try socket.send(Self.part(upload: 5, total: value.count, offset: offset, value[offset..<end]))
            #expect(try socket.readResponse().status == .ok)
            offset = end
            if offset < value.count {
                #expect(try reader.roundTrip(.get(key: Self.key)).body == old, "the older value until the last part")
            }
        }
        let plain = try reader.roundTrip(.get(key: Self.key))
        #expect(plain.status == .tooLarge && plain.bodyText.contains("range"), "\(plain.bodyText)")
        #expect((try Self.readByRanges(size: 300_000, on: reader) == value) == true)
        let block = 256 * 1024
        for bounds in [
            (block - 1)..<(block + 1), (value.count - 1)..<value.count, 0..<1, (3 * block)..<(5 * block + 7),
        ] {
            let reply = try Self.rangedGet(CachetValueRange(bounds), on: reader)
            #expect(reply.status == .ok && Array(reply.body[16...]) == Array(value[bounds]), "\(bounds)")
        }
        // A range longer than a frame holds is cut at the frame; the client asks again from there.
        let long = try Self.rangedGet(CachetValueRange(offset: 0), on: reader)
        #expect(long.status == .ok && long.body.count - 16 == (1 << 20) - 8 - 16)
        let past = try Self.rangedGet(CachetValueRange(offset: UInt64(value.count) + 1, length: 1), on: reader)
        #expect(
            past.status == .rangeNotSatisfiable && CachetValueRange.decodeReply(past.body)?.total == UInt64(value.count)
        )
        let stats = try node.stats()
        #expect(stats["uploads_completed"] as? Int == 1 && stats["uploads_in_progress"] as? Int == 0)
        #expect((stats["memory_payload_bytes"] as? Int ?? .max) < 1_000_000, "never held in the memory tier")
        #expect(Self.uploadsDirectory(directory).isEmpty)

        // Kept across a restart, and across a kill -9 after it was acknowledged.
        #expect(node.stop() == 0)
        node = try NodeProcess(arguments: arguments)
        socket = try node.connect()
        #expect((try Self.readByRanges(size: 1_000_000, on: socket) == value) == true)
        _ = node.stop(signal: SIGKILL)
        node = try NodeProcess(arguments: arguments)
        socket = try node.connect()
        #expect((try Self.readByRanges(size: 1_000_000, on: socket) == value) == true)
    }

    @Test func anUploadCutOffAtAnyStageIsFreedAndNeverVisible() throws {
        let directory = TemporaryDirectory(prefix: "cachet-upload-cut")
        defer { directory.remove() }
        // The default --upload-timeout (30 s): what frees the uploads below within seconds is their end.
        let node = try NodeProcess(arguments: ["--data-dir", directory.path, "--disk-limit", "64MiB"])
        let keeper = try node.connect()
        let old = Array("old".utf8)
        #expect(try keeper.roundTrip(.put(key: Self.key, value: old, ttl: 0)).status == .ok)
        let value = Self.value(3_000_000, seed: 2)
        let memoryBefore = try node.stats()["connection_memory_bytes"] as? Int ?? -1

        func expectClean(_ stage: String) throws {
            let deadline = Date().addingTimeInterval(5)
            var stats = try node.stats()
            while stats["uploads_in_progress"] as? Int != 0 || !Self.uploadsDirectory(directory).isEmpty,
                Date() < deadline
            {
                usleep(20_000)
                stats = try node.stats()
            }
            #expect(stats["uploads_in_progress"] as? Int == 0 && stats["uploads_staged_bytes"] as? Int == 0, "\(stage)")
            #expect(Self.uploadsDirectory(directory).isEmpty, "\(stage): staging file freed")
            #expect(try keeper.roundTrip(.get(key: Self.key)).body == old, "\(stage): never visible")
        }

        // Closed after the first part, after all but the last, and in the middle of a part's frame.
        for stopBefore in [1_000_000, 2_000_000] {
            let socket = try node.connect()
            #expect(
                try Self.upload(value, size: 1_000_000, on: socket, stopBefore: stopBefore).allSatisfy { $0 == .ok }
            )
            socket.close()
            try expectClean("closed before byte \(stopBefore)")
        }
        let halfway = try node.connect()
        #expect(try Self.upload(value, size: 1_000_000, on: halfway, stopBefore: 1_000_000) == [.ok])
        let last = Self.part(upload: 77, total: value.count, offset: 1_000_000, value[1_000_000..<2_000_000])
        try halfway.send(Array(last[0..<500_000]))
        usleep(100_000)
        halfway.close()
        try expectClean("closed inside a part")

        #expect(try node.stats()["uploads_abandoned"] as? Int == 3)
        #expect(try node.stats()["uploads_completed"] as? Int == 0, "none finished")

        // A part out of order ends the upload; a length that changes too; bad bodies are BAD_REQUEST.
        let disorder = try node.connect()
        #expect(try Self.upload(value, size: 1_000_000, on: disorder, stopBefore: 1_000_000) == [.ok])
        try disorder.send(Self.part(upload: 77, total: value.count, offset: 1_500_000, value[1_500_000..<1_600_000]))
        #expect(try disorder.readResponse().status == .badRequest)
        try disorder.send(Self.part(upload: 77, total: value.count, offset: 1_000_000, value[1_000_000..<1_100_000]))
        #expect(try disorder.readResponse().status == .badRequest, "the upload was given up")
        try disorder.send(Self.part(upload: 78, total: 10, offset: 0, [1, 2, 3]))
        #expect(try disorder.readResponse().status == .ok)
        try disorder.send(Self.part(upload: 78, total: 11, offset: 3, [4]))
        #expect(try disorder.readResponse().status == .badRequest)
        try disorder.send(Self.part(upload: 80, total: 10, offset: 0, [1, 2, 3]))
        #expect(try disorder.readResponse().status == .ok)
        try disorder.send(Self.part(upload: 80, total: 10, offset: 3, []))
        #expect(try disorder.readResponse().status == .badRequest, "a part with no bytes")
        // A first part again: the upload starts over, its earlier staging file freed.
        let other = Array("other".utf8)
        try disorder.send(Self.part(other, upload: 81, total: 10, offset: 0, [1, 2, 3]))
        #expect(try disorder.readResponse().status == .ok)
        try disorder.send(Self.part(other, upload: 81, total: 10, offset: 0, [4, 5, 6]))
        #expect(try disorder.readResponse().status == .ok)
        try disorder.send(Self.part(other, upload: 81, total: 10, offset: 3, [7, 8, 9, 10, 11, 12, 13]))
        #expect(try disorder.readResponse().status == .ok)
        #expect(try disorder.roundTrip(.get(key: other)).body == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13])
        try disorder.send(CachetCommand.put(key: Self.key, value: [1, 2, 3], ttl: 0).encoded(id: 3, flags: .part))
        #expect(try disorder.readResponse().status == .badRequest, "shorter than id, length and offset")
        try disorder.send(Self.part(upload: 79, total: 2, offset: 0, [1, 2, 3]))
        #expect(try disorder.readResponse().status == .badRequest, "runs past the length")
        #expect(try disorder.roundTrip(.ping).status == .ok, "the connection stays usable")
        try expectClean("refused parts")
        disorder.close()
        // The connections' memory is given back: what the parts took while they were written.
        let deadline = Date().addingTimeInterval(5)
        var memoryAfter = try node.stats()["connection_memory_bytes"] as? Int ?? -2
        while memoryAfter != memoryBefore && Date() < deadline {
            usleep(50_000)
            memoryAfter = try node.stats()["connection_memory_bytes"] as? Int ?? -2
        }
        #expect(memoryAfter == memoryBefore)
    }

    @Test func anUploadWithoutAPartForTheTimeoutIsGivenUp() throws {
        let directory = TemporaryDirectory(prefix: "cachet-upload-idle")
        defer { directory.remove() }
        let node = try NodeProcess(arguments: [
            "--data-dir", directory.path, "--disk-limit", "64MiB", "--upload-timeout", "1",
        ])
        let idle = try node.connect()
        let value = Self.value(3_000_000, seed: 2)
        #expect(try Self.upload(value, size: 1_000_000, on: idle, stopBefore: 1_000_000) == [.ok])
        let deadline = Date().addingTimeInterval(5)
        while try node.stats()["uploads_in_progress"] as? Int != 0 || !Self.uploadsDirectory(directory).isEmpty,
            Date() < deadline
        {
            usleep(50_000)
        }
        #expect(Self.uploadsDirectory(directory).isEmpty, "the staging file is freed")
        // Its next part is refused, and nothing is stored.
        try idle.send(Self.part(upload: 77, total: value.count, offset: 1_000_000, value[1_000_000..<2_000_000]))
        let refused = try idle.readResponse()
        #expect(refused.status == .badRequest && refused.bodyText.contains("offset 0"), "\(refused.bodyText)")
        #expect(try idle.roundTrip(.get(key: Self.key)).status == .notFound)
        #expect(try node.stats()["uploads_abandoned"] as? Int == 1)
    }

    @Test func twoUploadsOfOneKeyAndAnEmptyValueEndWithTheLastOneStoredWhole() throws {
        let directory = TemporaryDirectory(prefix: "cachet-upload-two")
        defer { directory.remove() }
        let node = try NodeProcess(arguments: ["--data-dir", directory.path, "--disk-limit", "64MiB"])
        let first = try node.connect()
        let second = try node.connect()
        let a = Self.value(2_000_000, seed: 3)
        let b = Self.value(1_500_000, seed: 4)
        // Interleaved, each on its own connection with its own id: each is stored whole when it ends.
        for index in 0..<4 {
            let offsetA = index * 500_000
            try first.send(Self.part(upload: 1, total: a.count, offset: offsetA, a[offsetA..<(offsetA + 500_000)]))
            #expect(try first.readResponse().status == .ok)
            if index < 3 {
                let offsetB = index * 500_000
                try second.send(Self.part(upload: 2, total: b.count, offset: offsetB, b[offsetB..<(offsetB + 500_000)]))
                #expect(try second.readResponse().status == .ok)
            }
            if index == 2 { #expect((try Self.readByRanges(size: 1 << 20, on: first) == b) == true, "b ended first") }
        }
        #expect((try Self.readByRanges(size: 1 << 20, on: second) == a) == true, "then a")
        try first.send(Self.part(Array("empty".utf8), upload: 3, total: 0, offset: 0, []))
        #expect(try first.readResponse().status == .ok)
        #expect(try first.roundTrip(.get(key: Array("empty".utf8))) == CachetResponse(opcode: .get, status: .ok, id: 1))
        // Values of one part are complete at once: nothing stays in progress.
        let stats = try node.stats()
        #expect(stats["uploads_in_progress"] as? Int == 0 && stats["uploads_staged_bytes"] as? Int == 0)
        #expect(stats["uploads_completed"] as? Int == 3)
    }

    @Test func killedDuringAnUploadTheNodeServesTheOlderValueAndFreesTheParts() throws {
        let directory = TemporaryDirectory(prefix: "cachet-upload-kill")
        defer { directory.remove() }
        let arguments = ["--data-dir", directory.path, "--disk-limit", "64MiB"]
        var node = try NodeProcess(arguments: arguments)
        let socket = try node.connect()
        let old = Self.value(1_200_000, seed: 9)
        #expect(try socket.roundTrip(.put(key: Self.key, value: old, ttl: 0)).status == .ok)
        // Long enough for the older value's write to be applied and checkpointed.
        usleep(1_500_000)
        let value = Self.value(4_000_000, seed: 5)
        #expect(try Self.upload(value, size: 1_000_000, on: socket, stopBefore: 3_000_000).allSatisfy { $0 == .ok })
        #expect(Self.uploadsDirectory(directory).count == 1)
        _ = node.stop(signal: SIGKILL)
        node = try NodeProcess(arguments: arguments)
        let after = try node.connect()
        let read = try Self.readByRanges(size: 1 << 20, on: after)
        #expect(read == nil || read == old, "the older value or a miss, never a mixture")
        #expect(Self.uploadsDirectory(directory).isEmpty, "parts left by the crash are deleted at start")
        #expect(node.log.contains("uploads that did not finish"))

        // Stored whole, then killed while readers read it by ranges: read back intact after the restart.
        #expect(try Self.upload(value, size: 1_000_000, on: after).allSatisfy { $0 == .ok })
        // Past the journal's checkpoint (a write killed sooner may read as a miss, DISK-FORMAT.md).
        usleep(1_500_000)
        let readers = try (0..<3).map { _ in try node.connect() }
        let reading = DispatchGroup()
        for (index, reader) in readers.enumerated() {
            DispatchQueue.global().async(group: reading) {
                var offset = UInt64(index * 333_333)
                // Until the node dies under it: every answer before that is a byte-exact range.
                while let reply = try? Self.rangedGet(CachetValueRange(offset: offset, length: 500_000), on: reader),
                    reply.status == .ok
                {
                    let start = Int(offset)
                    #expect(Array(reply.body[16...]) == Array(value[start..<min(value.count, start + 500_000)]))
                    offset = (offset + 700_001) % UInt64(value.count)
                }
            }
        }
        usleep(300_000)
        _ = node.stop(signal: SIGKILL)
        reading.wait()
        node = try NodeProcess(arguments: arguments)
        #expect((try Self.readByRanges(size: 1 << 20, on: try node.connect()) == value) == true)
    }

    @Test func anUploadIsAWriteToWatchersAndToUsersKeyPrefixes() throws {
        let directory = TemporaryDirectory(prefix: "cachet-upload-users")
        defer { directory.remove() }
        let file = directory.appending("users.json")
        try NodeAuthTests.writeAuthFile(file, NodeAuthTests.users)
        let node = try NodeProcess(arguments: [
            "--auth-file", file, "--data-dir", directory.appending("data"), "--disk-limit", "64MiB",
        ])
        let watcher = try node.connect()
        #expect(try NodeAuthTests.auth(watcher, "ops", "ops-secret-0123456789").status == .ok)
        _ = try NodeWatchTests.watch(watcher, CachetWatchRequest(prefix: Array("shop:".utf8), includesValues: true))
        let shop = try node.connect()
        #expect(try NodeAuthTests.auth(shop, "shop", "shop-secret-0123456789").status == .ok)
        let value = Self.value(2_500_000, seed: 11)
        // Outside the user's prefixes: every part is FORBIDDEN, nothing is staged.
        #expect(
            try Self.upload(value, key: Array("other:film".utf8), size: 1_000_000, on: shop) == [
                .forbidden, .forbidden, .forbidden,
            ]
        )
        #expect(
            ((try? FileManager.default.contentsOfDirectory(atPath: directory.appending("data/uploads"))) ?? []).isEmpty
        )
        // Under them: stored, and the watcher is told, the value left out for its length.
        #expect(
            try Self.upload(value, key: Array("shop:film".utf8), size: 1_000_000, on: shop).allSatisfy { $0 == .ok }
        )
        let event = try NodeWatchTests.event(watcher)
        #expect(event.kind == .put && event.key == Array("shop:film".utf8))
        #expect(event.value == nil && event.valueOmitted)
    }

    @Test func aRangeFromDiskIsCutToTheConnectionsMemoryBudget() throws {
        let directory = TemporaryDirectory(prefix: "cachet-upload-budget")
        defer { directory.remove() }
        // A frame holds 8 MiB, but replies may take only 5 of the connections' 10 MiB (the rest is kept for a
        // request's frame): a 6 MB range comes back in pieces.
        let node = try NodeProcess(arguments: [
            "--data-dir", directory.path, "--disk-limit", "64MiB", "--max-frame", "8MiB", "--connection-memory",
            "10MiB",
        ])
        let socket = try node.connect()
        let value = Self.value(6_000_000, seed: 12)
        #expect(try Self.upload(value, size: 1_000_000, on: socket).allSatisfy { $0 == .ok })
        let reply = try Self.rangedGet(CachetValueRange(offset: 0), on: socket)
        let carried = reply.body.count - 16
        #expect(reply.status == .ok && carried > 0 && carried <= 5 << 20, "\(carried) bytes")
        #expect((Array(reply.body[16...]) == Array(value[0..<carried])) == true)
        #expect((try Self.readByRanges(size: 6_000_000, on: socket) == value) == true)
    }

    @Test func manyGetsOfALargeValueOnDiskWaitForTheBudgetAndAllAreAnswered() throws {
        let directory = TemporaryDirectory(prefix: "cachet-upload-gets")
        defer { directory.remove() }
        // Values over 1 MiB live on disk only; the connections' budget (16 MiB) holds two 6 MB reads at once.
        let node = try NodeProcess(arguments: [
            "--data-dir", directory.path, "--disk-limit", "64MiB", "--large-value", "1MiB", "--max-frame", "8MiB",
            "--connection-memory", "16MiB",
        ])
        let writer = try node.connect()
        let value = Self.value(6_000_000, seed: 13)
        #expect(try writer.roundTrip(.put(key: Self.key, value: value, ttl: 0)).status == .ok)
        usleep(200_000)
        let readers = try (0..<8).map { _ in try node.connect() }
        for reader in readers { try reader.send(CachetCommand.get(key: Self.key).encoded(id: 5)) }
        for reader in readers {
            let reply = try reader.readResponse()
            #expect(reply.status == .ok && (reply.body == value) == true)
        }
        let stats = try node.stats()
        #expect((stats["disk_reads_deferred"] as? Int ?? 0) > 0, "reads waited for the budget")
        #expect((stats["memory_payload_bytes"] as? Int ?? .max) < 1_000_000, "the value stays on disk only")
    }

    @Test func aNodeWithoutADiskTierRefusesPartsClearly() throws {
        let node = try NodeProcess(arguments: ["--disk-limit", "0"])
        let socket = try node.connect()
        try socket.send(Self.part(upload: 1, total: 10, offset: 0, [1, 2]))
        let reply = try socket.readResponse()
        #expect(reply.status == .tooLarge && reply.bodyText.contains("disk tier"), "\(reply.bodyText)")
        // A part large enough to be received straight into an entry is refused the same way, never stored.
        let large = Self.value(200_000)
        try socket.send(Self.part(upload: 2, total: 400_000, offset: 0, large[...]))
        #expect(try socket.readResponse().status == .tooLarge)
        #expect(try socket.roundTrip(.get(key: Self.key)).status == .notFound)
        #expect(try socket.roundTrip(.ping).status == .ok)
    }

    @Test func partsSentThroughAMemberThatDoesNotOwnTheKeyAreForwardedToTheOwner() throws {
        let cluster = try NodeForwardingTests.Cluster(extraArguments: ["--max-frame", "2MiB"], disk: true)
        let key = Array(cluster.key(ownedBy: "n2").utf8)
        let through = try cluster.node("n1").connect()
        let value = Self.value(3_000_000, seed: 6)
        #expect(try Self.upload(value, key: key, size: 1_000_000, on: through).allSatisfy { $0 == .ok })
        // Longer than a frame: its owner answers a GET with the frames flag in several frames, a member that
        // forwards it in one (TOO_LARGE: a peer's reply is one frame).
        try through.send(CachetCommand.get(key: key).encoded(id: 3, flags: .frames))
        let forwarded = try through.readResponse()
        #expect(forwarded.status == .tooLarge && forwarded.id == 3, "\(forwarded.bodyText)")
        let direct = try cluster.node("n2").connect()
        try direct.send(CachetCommand.get(key: key).encoded(id: 4, flags: .frames))
        #expect((try NodeValueFramesTests.readFrames(on: direct).flatMap(\.body) == value) == true)
        #expect((try Self.readByRanges(size: 700_000, on: through, key: key) == value) == true)
        let owner = try cluster.node("n2").connect()
        #expect((try Self.readByRanges(size: 1 << 20, on: owner, key: key) == value) == true)
        #expect(try cluster.stats("n2")["uploads_completed"] as? Int == 1)
        #expect(try cluster.stats("n1")["uploads_completed"] as? Int == 0)
    }
}
