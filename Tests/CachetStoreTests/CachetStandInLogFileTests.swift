import CachetTestSupport
import Foundation
import Testing

@testable import CachetStore

#if canImport(Glibc)
import Glibc
#endif

/// The stand-in log file (`Protocol/DISK-FORMAT.md`, "Stand-in log file"): records read back as written,
/// a record cut short ignored, a corrupt one or a bad header reported as damage (what followed is
/// unknown), the limits applied on reading, clean owners dropped and the file rewritten.
@Suite("Disk: the stand-in log file")
struct CachetStandInLogFileTests {
    typealias File = CachetStandInLogFile

    static func open(_ directory: TemporaryDirectory, maximumKeys: Int = 100, maximumBytes: Int = 1 << 20) -> (
        file: File, replay: File.Replay
    ) {
        File.open(directory: directory.path, maximumKeys: maximumKeys, maximumBytes: maximumBytes)
    }

    static func bytes(_ directory: TemporaryDirectory) -> [UInt8] {
        Array((try? Data(contentsOf: URL(fileURLWithPath: directory.appending(File.fileName)))) ?? Data())
    }

    static func write(_ bytes: [UInt8], to directory: TemporaryDirectory) throws {
        try Data(bytes).write(to: URL(fileURLWithPath: directory.appending(File.fileName)))
    }

    /// A file holding, in order: k1 and k2 for A, k3 for B, B overflowed, k4 for C.
    static func sample(_ directory: TemporaryDirectory) throws -> [Int] {
        let (file, replay) = open(directory)
        #expect(replay == File.Replay(), "no file: nothing")
        #expect(file.rewrite([]) == nil)
        var ends = [File.headerSize]
        for record: File.Record in [
            .key(owner: "A", key: Array("k1".utf8)), .key(owner: "A", key: Array("k2".utf8)),
            .key(owner: "B", key: Array("k3".utf8)), .overflowed(owner: "B"), .key(owner: "C", key: Array("k4".utf8)),
        ] {
            #expect(file.append(record) == nil)
            ends.append(file.usage.bytes)
        }
        #expect(bytes(directory).count == ends.last)
        return ends
    }

    @Test func recordsAreReadBackAsWritten() throws {
        let directory = TemporaryDirectory(prefix: "cachet-standin")
        let ends = try Self.sample(directory)
        let replay = Self.open(directory).replay
        #expect(replay.damage == nil && replay.truncatedTail == 0 && replay.records == 5)
        #expect(replay.validLength == ends.last)
        #expect(
            replay.owners["A"] == File.Owner(keys: [Array("k1".utf8), Array("k2".utf8)], bytes: 4, overflowed: false)
        )
        #expect(replay.owners["B"]?.overflowed == true)
        #expect(replay.owners["C"]?.keys == [Array("k4".utf8)])
        // The exact bytes of one record (`Protocol/DISK-FORMAT.md`).
        var record: [UInt8] = []
        File.encode(.key(owner: "A", key: Array("k1".utf8)), to: &record)
        #expect(Array(record[0..<8]) == [0, 0, 0, 15, 1, 1, 0, 2])
        #expect(Array(record[8..<11]) == Array("Ak1".utf8))
        #expect(Array(Self.bytes(directory)[16..<31]) == record)
        #expect(Array(Self.bytes(directory)[0..<8]) == Array("CCHS".utf8) + [1, 0, 0, 0])
    }

    @Test(arguments: [1, 3, 4, 7, 8, 11])
    func aLastRecordCutShortIsIgnored(cut: Int) throws {
        let directory = TemporaryDirectory(prefix: "cachet-standin")
        let ends = try Self.sample(directory)
        // The last record (k4 for C) loses all but `cut` bytes: an append that did not finish.
        let bytes = Self.bytes(directory)
        try Self.write(Array(bytes[0..<(ends[4] + cut)]), to: directory)
        let replay = Self.open(directory).replay
        #expect(replay.damage == nil)
        #expect(replay.truncatedTail == cut)
        #expect(replay.records == 4 && replay.validLength == ends[4])
        #expect(
            replay.owners["C"] == nil && replay.owners["A"]?.keys.count == 2 && replay.owners["B"]?.overflowed == true
        )
    }

    @Test(arguments: [0, 3, 4, 5, 6, 9, 14])
    func aCorruptRecordIsDamageAndEndsTheReading(byte: Int) throws {
        let directory = TemporaryDirectory(prefix: "cachet-standin")
        let ends = try Self.sample(directory)
        // One byte of the second record (k2 for A) flipped: it and everything after it are unknown.
        var bytes = Self.bytes(directory)
        bytes[ends[1] + byte] ^= 0x40
        try Self.write(bytes, to: directory)
        let replay = Self.open(directory).replay
        #expect(replay.damage != nil, "\(replay)")
        #expect(replay.records == 1 && replay.validLength == ends[1])
        #expect(replay.owners.keys.sorted() == ["A"] && replay.owners["A"]?.keys == [Array("k1".utf8)])
    }

    @Test func aBadHeaderOrAnUnreadableFileIsDamage() throws {
        let directory = TemporaryDirectory(prefix: "cachet-standin")
        _ = try Self.sample(directory)
        var bytes = Self.bytes(directory)
        bytes[2] = UInt8(ascii: "X")
        try Self.write(bytes, to: directory)
        var replay = Self.open(directory).replay
        #expect(replay.damage != nil && replay.records == 0 && replay.owners.isEmpty)
        try Self.write(Array(bytes[0..<10]), to: directory)
        replay = Self.open(directory).replay
        #expect(replay.damage != nil)
        // An empty file is no file.
        try Self.write([], to: directory)
        #expect(Self.open(directory).replay == File.Replay())
        // A directory in its place can be neither read nor replaced: damage, and every append refused.
        unlink(directory.appending(File.fileName))
        mkdir(directory.appending(File.fileName), 0o755)
        let (file, unreadable) = Self.open(directory)
        #expect(unreadable.damage != nil)
        #expect(file.rewrite([("A", [[1]], false)]) != nil)
        let refused = file.append(.key(owner: "A", key: [2]))
        #expect(refused?.code == .writeRefused)
        #expect(refused?.message.contains("restart") == true, "\(refused?.message ?? "")")
    }

    @Test func theLimitsOverflowAnOwnerOnReading() throws {
        let directory = TemporaryDirectory(prefix: "cachet-standin")
        let (file, _) = Self.open(directory)
        #expect(file.rewrite([]) == nil)
        for byte in UInt8(0)..<5 { #expect(file.append(.key(owner: "A", key: [byte, byte])) == nil) }
        #expect(file.append(.key(owner: "B", key: Array(repeating: 7, count: 4096))) == nil)
        let byKeys = Self.open(directory, maximumKeys: 3).replay
        #expect(byKeys.owners["A"]?.overflowed == true && byKeys.owners["A"]?.keys.count == 3)
        #expect(byKeys.owners["B"]?.overflowed == false)
        let byBytes = Self.open(directory, maximumBytes: 4000).replay
        #expect(byBytes.owners["A"]?.overflowed == false && byBytes.owners["B"]?.overflowed == true)
        #expect(byBytes.owners["B"]?.keys.isEmpty == true)
        // A key or an owner id a record cannot hold is refused, not written.
        #expect(file.append(.key(owner: "A", key: Array(repeating: 1, count: 4097))) != nil)
        #expect(file.append(.key(owner: String(repeating: "o", count: 256), key: [1])) != nil)
        #expect(Self.open(directory).replay.records == 6)
    }

    @Test func aCleanOwnerIsDroppedAndTheFileRewrittenWhenWorthIt() throws {
        let directory = TemporaryDirectory(prefix: "cachet-standin")
        let (file, _) = Self.open(directory)
        #expect(file.rewrite([]) == nil)
        // The only owner clean: the file is cut back to its header.
        #expect(file.append(.key(owner: "A", key: [1])) == nil)
        #expect(
            file.ownerClean(
                "A",
                live: {
                    Issue.record("no rewrite expected"); return []
                }
            ) == nil
        )
        #expect(Self.bytes(directory).count == File.headerSize && file.usage.bytes == File.headerSize)
        #expect(Self.open(directory).replay.owners.isEmpty)

        // Small: a clean record appended, no rewrite.
        #expect(file.append(.key(owner: "A", key: [1])) == nil)
        #expect(file.append(.key(owner: "B", key: [2])) == nil)
        #expect(
            file.ownerClean(
                "A",
                live: {
                    Issue.record("no rewrite expected"); return []
                }
            ) == nil
        )
        var replay = Self.open(directory).replay
        #expect(replay.owners.keys.sorted() == ["B"] && replay.records == 3)
        // A later write for A counts again.
        #expect(file.append(.key(owner: "A", key: [3])) == nil)
        replay = Self.open(directory).replay
        #expect(replay.owners["A"]?.keys == [[3]])

        // Large and mostly dead: rewritten with the live owners only.
        let keys = (0..<4000).map { Array("key-\($0)".utf8) }
        for key in keys { #expect(file.append(.key(owner: "C", key: key)) == nil) }
        let before = file.usage
        #expect(before.bytes > File.compactionThreshold)
        var asked = 0
        #expect(
            file.ownerClean("C") {
                asked += 1
                return [("A", [[3]], false), ("B", [[2]], false)]
            } == nil
        )
        #expect(asked == 1)
        #expect(file.usage.bytes < 100 && file.usage.rewrites == before.rewrites + 1)
        #expect(Self.bytes(directory).count == file.usage.bytes)
        #expect(!FileManager.default.fileExists(atPath: directory.appending(File.fileName + ".tmp")))
        replay = Self.open(directory).replay
        #expect(replay.owners["A"]?.keys == [[3]] && replay.owners["B"]?.keys == [[2]] && replay.owners["C"] == nil)
        // Appends go on after the rewrite, into the new file.
        #expect(file.append(.overflowed(owner: "B")) == nil)
        #expect(Self.open(directory).replay.owners["B"]?.overflowed == true)
        // A rewrite writes an overflowed owner's CLEAR, not its keys.
        #expect(file.rewrite([("B", [[2], [4]], true)]) == nil)
        replay = Self.open(directory).replay
        #expect(replay.records == 1 && replay.owners["B"] == File.Owner(keys: [], bytes: 0, overflowed: true))
    }
}
