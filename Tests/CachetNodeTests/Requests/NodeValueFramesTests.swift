import CachetStore
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A GET of a value longer than one frame, answered in several frames to a client that asks with the
/// `frames` flag (`Protocol/PROTOCOL.md`, "GET of a value longer than a frame"), on real node processes: the
/// pieces join to the value, the requests behind it are answered after its last frame, a write of the key
/// meanwhile never mixes two values in one reply, a client that goes away mid-reply gives its memory back,
/// and a block found damaged mid-reply ends it with SERVER_ERROR.
@Suite("Node: values answered in several frames", .dedicatedThreads)
struct NodeValueFramesTests {
    static let key = Array("video:7".utf8)

    static func arguments(_ directory: TemporaryDirectory) -> [String] {
        ["--data-dir", directory.path, "--disk-limit", "64MiB", "--max-frame", "1MiB", "--memory-limit", "2MiB"]
    }

    /// Stores `value` in parts of 700,001 bytes.
    static func store(_ value: [UInt8], upload: UInt64, on socket: TestSocket) throws {
        let statuses = try NodeUploadTests.upload(value, key: key, upload: upload, size: 700_001, on: socket)
        #expect(statuses.allSatisfy { $0 == .ok }, "\(statuses)")
    }

    /// The frames of one reply: every CONTINUES frame, then the one that ends it.
    static func readFrames(on socket: TestSocket) throws -> [CachetResponse] {
        var frames: [CachetResponse] = []
        repeat { frames.append(try socket.readResponse()) } while frames.last?.status == .continues
        return frames
    }

    @Test func aValueLongerThanAFrameIsAnsweredInSeveralFramesThatJoinToIt() throws {
        let directory = TemporaryDirectory(prefix: "cachet-frames")
        defer { directory.remove() }
        let node = try NodeProcess(arguments: Self.arguments(directory))
        let socket = try node.connect()
        let value = NodeUploadTests.value(3_500_017, seed: 3)
        try Self.store(value, upload: 9, on: socket)

        // Pipelined behind it: a PING and a short GET, answered after its last frame, in order.
        try socket.send(
            CachetCommand.get(key: Self.key).encoded(id: 41, flags: .frames)
                + CachetCommand.ping.encoded(id: 42)
                + CachetCommand.get(key: Array("absent".utf8)).encoded(id: 43, flags: .frames)
        )
        let frames = try Self.readFrames(on: socket)
        #expect(frames.count >= 4, "a 3.5 MB value in frames of at most 1 MiB")
        #expect(frames.allSatisfy { $0.id == 41 && $0.opcode == .get })
        #expect(frames.last?.status == .ok)
        #expect(frames.allSatisfy { $0.body.count <= (1 << 20) - 8 })
        #expect((frames.flatMap(\.body) == value) == true)
        let ping = try socket.readResponse()
        #expect(ping.id == 42 && ping.status == .ok && ping.opcode == .ping)
        let miss = try socket.readResponse()
        #expect(miss.id == 43 && miss.status == .notFound)

        // Without the flag it is TOO_LARGE, as before; with the ttl flag the first frame starts with the TTL.
        let plain = try socket.roundTrip(.get(key: Self.key))
        #expect(plain.status == .tooLarge && plain.bodyText.contains("frames flag"), "\(plain.bodyText)")
        try socket.send(CachetCommand.get(key: Self.key).encoded(id: 44, flags: [.frames, .ttl]))
        let timed = try Self.readFrames(on: socket)
        #expect(timed.last?.status == .ok && timed.first.map { Array($0.body.prefix(4)) } == [0, 0, 0, 0])
        #expect((Array(timed.flatMap(\.body).dropFirst(4)) == value) == true)
        // A short value with the flag is one ordinary frame.
        #expect(try socket.roundTrip(.put(key: Array("short".utf8), value: [1, 2, 3], ttl: 0)).status == .ok)
        try socket.send(CachetCommand.get(key: Array("short".utf8)).encoded(id: 45, flags: .frames))
        let short = try socket.readResponse()
        #expect(short.status == .ok && short.body == [1, 2, 3] && short.id == 45)
        let stats = try node.stats()
        #expect(stats["connection_memory_bytes"] as? Int ?? .max < 1 << 20)
    }

    @Test func aWriteDuringTheReplyNeverMixesTwoValuesAndAClientThatLeavesGivesItsMemoryBack() throws {
        let directory = TemporaryDirectory(prefix: "cachet-frames")
        defer { directory.remove() }
        let node = try NodeProcess(arguments: Self.arguments(directory))
        let writer = try node.connect()
        let old = NodeUploadTests.value(6_000_000, seed: 4)
        let new = NodeUploadTests.value(5_000_000, seed: 5)
        try Self.store(old, upload: 1, on: writer)

        // A slow reader: its socket buffer small, reading one frame, then the key is replaced, then the rest.
        let reader = try node.connect()
        reader.setReceiveBuffer(64 << 10)
        try reader.send(CachetCommand.get(key: Self.key).encoded(id: 7, flags: .frames))
        var frames = [try reader.readResponse()]
        #expect(frames[0].status == .continues)
        try Self.store(new, upload: 2, on: writer)
        frames += try Self.readFrames(on: reader)
        #expect(frames.last?.status == .ok)
        #expect((frames.flatMap(\.body) == old) == true, "the reply started with the older value ends with it")
        try reader.send(CachetCommand.get(key: Self.key).encoded(id: 8, flags: .frames))
        #expect((try Self.readFrames(on: reader).flatMap(\.body) == new) == true)

        // Clients that ask and read one frame, or none, then go away: the node gives their memory back and
        // goes on serving.
        for _ in 0..<20 {
            let leaving = try node.connect()
            leaving.setReceiveBuffer(32 << 10)
            try leaving.send(CachetCommand.get(key: Self.key).encoded(id: 1, flags: .frames))
            if Bool.random() { _ = try leaving.readResponse() }
            leaving.close()
        }
        var settled = false
        for _ in 0..<100 where !settled {
            let stats = try node.stats()
            settled = (stats["connection_memory_bytes"] as? Int ?? .max) < 256 << 10
            if !settled { usleep(50_000) }
        }
        #expect(settled, "connection memory back below 256 KiB")
        try writer.send(CachetCommand.get(key: Self.key).encoded(id: 9, flags: .frames))
        #expect((try Self.readFrames(on: writer).flatMap(\.body) == new) == true)
    }

    @Test func aBlockFoundDamagedMidReplyEndsItWithServerError() throws {
        let directory = TemporaryDirectory(prefix: "cachet-frames")
        defer { directory.remove() }
        var node = try NodeProcess(arguments: Self.arguments(directory))
        // Bytes that do not compress, so its blocks are stored raw and any flipped byte is in the value.
        var state: UInt64 = 0x9e37_79b9_7f4a_7c15
        let value = (0..<4_000_000).map { _ -> UInt8 in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: state >> 33)
        }
        try Self.store(value, upload: 3, on: try node.connect())
        #expect(node.stop() == 0)
        // A byte of the value's last block flipped.
        let enumerator = FileManager.default.enumerator(atPath: directory.path)
        var file: String?
        while file == nil, let name = enumerator?.nextObject() as? String {
            if (name as NSString).lastPathComponent.utf8.count == 64 { file = directory.appending(name) }
        }
        let path = try #require(file)
        var bytes = try #require(FileManager.default.contents(atPath: path))
        bytes[bytes.count - 1000] ^= 0x01
        _ = FileManager.default.createFile(atPath: path, contents: bytes)

        node = try NodeProcess(arguments: Self.arguments(directory))
        let socket = try node.connect()
        try socket.send(CachetCommand.get(key: Self.key).encoded(id: 5, flags: .frames))
        let frames = try Self.readFrames(on: socket)
        #expect(frames.count > 1 && frames.dropLast().allSatisfy { $0.status == .continues })
        #expect(
            frames.last?.status == .serverError && frames.last?.bodyText.contains("void") == true,
            "\(frames.map(\.status))"
        )
        // The damaged file is gone: a miss, never a corrupt byte.
        try socket.send(CachetCommand.get(key: Self.key).encoded(id: 6, flags: .frames))
        #expect(try socket.readResponse().status == .notFound)
        #expect(try node.stats()["disk_corrupt"] as? Int == 1)
    }
}
