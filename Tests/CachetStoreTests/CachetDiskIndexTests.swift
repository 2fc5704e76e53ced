import CachetTestSupport
import Testing

@testable import CachetStore

@Suite("Disk index")
struct CachetDiskIndexTests {
    /// What the index should hold, most recently used first.
    struct ModelEntry: Equatable {
        var digest: KeyDigest
        var fileSize: Int
        var logicalSize: Int
        var expiry: UInt32
        var scannedModified: UInt32
    }

    static func digest(_ i: Int) -> KeyDigest { KeyDigest(a: UInt64(i), b: 7, c: 0, d: UInt64(i) << 32) }

    static func contents(_ index: DiskIndex) -> [ModelEntry] {
        index.inRecencyOrder().map {
            ModelEntry(
                digest: $0.digest,
                fileSize: $0.fileSize,
                logicalSize: $0.logicalSize,
                expiry: $0.expiry,
                scannedModified: $0.scannedModified
            )
        }
    }

    @Test(arguments: [1, 2, 3] as [UInt64])
    func randomOperationsMatchAModel(seed: UInt64) {
        var random = SplitMix64(state: seed)
        var index = DiskIndex()
        var model: [ModelEntry] = []
        func position(_ digest: KeyDigest) -> Int? { model.firstIndex { $0.digest == digest } }

        for step in 0..<4000 {
            let digest = Self.digest(Int.random(in: 0..<40, using: &random))
            let fileSize = Int.random(in: 30...5000, using: &random)
            let entry = ModelEntry(
                digest: digest,
                fileSize: fileSize,
                logicalSize: fileSize * 3,
                expiry: UInt32.random(in: 0...9, using: &random),
                scannedModified: 0
            )
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<30:
                index.upsert(digest, fileSize: entry.fileSize, logicalSize: entry.logicalSize, expiry: entry.expiry)
                if let at = position(digest) { model.remove(at: at) }
                model.insert(entry, at: 0)
            case 30..<50:
                var scanned = entry
                scanned.scannedModified = Bool.random(using: &random) ? 0 : UInt32.random(in: 1...50, using: &random)
                index.appendOldest(
                    digest,
                    fileSize: scanned.fileSize,
                    logicalSize: scanned.logicalSize,
                    expiry: scanned.expiry,
                    scannedModified: scanned.scannedModified
                )
                if let at = position(digest) { model.remove(at: at) }
                model.append(scanned)
            case 50..<65:
                index.touch(digest)
                if let at = position(digest) {
                    var touched = model.remove(at: at)
                    touched.scannedModified = 0
                    model.insert(touched, at: 0)
                }
            case 65..<80:
                let removed = index.remove(digest)
                let expected = position(digest).map { model.remove(at: $0) }
                #expect(removed?.digest == expected?.digest)
                #expect(removed?.fileSize == expected?.fileSize)
            case 80..<90:
                #expect(index.oldest?.digest == model.last?.digest)
                if let oldest = index.oldest {
                    index.remove(oldest.digest)
                    model.removeLast()
                }
            case 90..<99:
                // What a finished rebuild does, with other operations between listing and moving.
                let listed = index.scannedEntries()
                #expect(listed.map(\.digest) == model.filter { $0.scannedModified != 0 }.map(\.digest))
                if Bool.random(using: &random), let some = model.randomElement(using: &random) {
                    index.touch(some.digest)
                    let at = position(some.digest)!
                    var touched = model.remove(at: at)
                    touched.scannedModified = 0
                    model.insert(touched, at: 0)
                }
                let sorted = listed.sorted { $0.modified > $1.modified }
                index.moveToOldestEnd(sorted)
                for moved in sorted {
                    guard let at = position(moved.digest), model[at].scannedModified == moved.modified else { continue }
                    model.append(model.remove(at: at))
                }
            default:
                index.removeAll()
                model.removeAll()
            }
            index.checkInvariants()
            #expect(Self.contents(index) == model, "step \(step)")
            #expect(index.count == model.count)
            #expect(index.fileBytes == model.reduce(0) { $0 + $1.fileSize })
            #expect(index.logicalBytes == model.reduce(0) { $0 + $1.logicalSize })
            if Self.contents(index) != model { return }
        }
    }

    @Test func scannedEntriesAreOrderedOldestLastByModificationTime() {
        var index = DiskIndex()
        index.upsert(Self.digest(100), fileSize: 1, logicalSize: 1, expiry: 0)
        for (i, modified) in [30, 10, 50, 20, 40].enumerated() {
            index.appendOldest(
                Self.digest(i),
                fileSize: 1,
                logicalSize: 1,
                expiry: 0,
                scannedModified: UInt32(modified)
            )
        }
        index.touch(Self.digest(3))  // used since the scan: stays where the use put it
        index.moveToOldestEnd(index.scannedEntries().sorted { $0.modified > $1.modified })
        index.checkInvariants()
        #expect(index.inRecencyOrder().map(\.digest) == [3, 100, 2, 4, 0, 1].map(Self.digest))
        #expect(index.oldest?.digest == Self.digest(1))
    }
}
