import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Building the disk index at start-up: from the index file of a clean shutdown, or by scanning files.
extension CachetDiskStore {
    /// Index file: magic `CCHI`, version 1, entry count (u64), then per entry from most to least recently
    /// used: digest (32 bytes), file size (u64), logical size (u64), expiry (u32); then a CRC-32 of all of
    /// it. Written at clean shutdown and deleted once loaded, so it only ever describes a directory no
    /// process has touched since.
    static let indexMagic: [UInt8] = Array("CCHI".utf8)
    static let indexRecordSize = 32 + 8 + 8 + 4

    static func writeIndexFile(directory: String, nodes: [DiskIndex.Node], logger: Logger) {
        var bytes = indexMagic
        bytes.append(1)
        DiskEntryFormat.append(UInt64(nodes.count), to: &bytes)
        bytes.reserveCapacity(bytes.count + nodes.count * indexRecordSize + 4)
        for node in nodes {
            var digest = node.digest
            withUnsafeBytes(of: &digest) { bytes.append(contentsOf: $0) }
            DiskEntryFormat.append(UInt64(node.fileSize), to: &bytes)
            DiskEntryFormat.append(UInt64(node.logicalSize), to: &bytes)
            DiskEntryFormat.append(node.expiry, to: &bytes)
        }
        let crc = bytes.withUnsafeBytes { DiskEntryFormat.crc32($0) }
        DiskEntryFormat.append(crc, to: &bytes)
        let path = directory + "/index"
        if let failure = DiskFiles.replace(path, with: bytes, temporary: path + ".tmp") {
            logger.warning(
                "cannot write the index file; the next start will scan the entry files",
                metadata: ["disk.path": "\(path)", "error.message": "\(DiskFiles.describe(failure))"]
            )
        }
    }

    /// Loads the index file into `index`; false when there is none or it fails its checks.
    static func loadIndexFile(directory: String, into index: inout DiskIndex) -> Bool {
        guard case .bytes(let bytes) = DiskFiles.read(directory + "/index"), bytes.count >= 17 else { return false }
        return bytes.withUnsafeBytes { raw -> Bool in
            guard Array(raw[0..<4]) == indexMagic, raw[4] == 1 else { return false }
            let count = Int(DiskEntryFormat.read(UInt64.self, raw, at: 5))
            guard count >= 0, count <= (raw.count - 17) / indexRecordSize, 13 + count * indexRecordSize + 4 == raw.count
            else {
                return false
            }
            let stored = DiskEntryFormat.read(UInt32.self, raw, at: raw.count - 4)
            guard DiskEntryFormat.crc32(UnsafeRawBufferPointer(rebasing: raw[0..<(raw.count - 4)])) == stored else {
                return false
            }
            var offset = 13
            for _ in 0..<count {
                var digest = KeyDigest(a: 0, b: 0, c: 0, d: 0)
                withUnsafeMutableBytes(of: &digest) {
                    $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: raw[offset..<(offset + 32)]))
                }
                let fileSize = Int(DiskEntryFormat.read(UInt64.self, raw, at: offset + 32))
                let logicalSize = Int(DiskEntryFormat.read(UInt64.self, raw, at: offset + 40))
                let expiry = DiskEntryFormat.read(UInt32.self, raw, at: offset + 48)
                index.appendOldest(digest, fileSize: fileSize, logicalSize: logicalSize, expiry: expiry)
                offset += indexRecordSize
            }
            return true
        }
    }

    /// Checks the index against the files: up to `samples` entries, spread over the whole index, must have
    /// a file of exactly the recorded size. Cheap (one `stat` each) and catches an index file that outlived
    /// changes to the directory.
    static func sampleMatches(_ index: DiskIndex, directory: String, samples: Int = 256) -> Bool {
        let nodes = index.inRecencyOrder()
        guard !nodes.isEmpty else { return true }
        let step = max(1, nodes.count / samples)
        for position in stride(from: 0, to: nodes.count, by: step) {
            let node = nodes[position]
            let hex = node.digest.hex
            let path = "\(directory)/\(hex.prefix(2))/\(hex.dropFirst(2).prefix(2))/\(hex)"
            var info = stat()
            guard stat(path, &info) == 0, Int(info.st_size) == node.fileSize else { return false }
        }
        return true
    }

    /// What reading one entry file's header found.
    enum ScannedFile {
        case entry(digest: KeyDigest, fileSize: Int, logicalSize: Int, expiry: UInt32, modified: UInt32)
        case corrupt
        case gone
    }

    /// Calls `body` with the path and name of every file in the two levels of fan-out directories.
    static func forEachEntryFile(directory: String, _ body: (String, String) -> Bool) {
        for first in DiskFiles.list(directory) where first.utf8.count == 2 {
            let firstPath = directory + "/" + first
            for second in DiskFiles.list(firstPath) where second.utf8.count == 2 {
                let secondPath = firstPath + "/" + second
                for name in DiskFiles.list(secondPath) {
                    if !body(secondPath + "/" + name, name) { return }
                }
            }
        }
    }

    /// Reads and checks the header of one entry file (not its payload).
    static func scanFile(_ path: String, name: String) -> ScannedFile {
        guard let digest = KeyDigest(hex: name[...]) else { return .corrupt }
        let headerAndKey = DiskEntryFormat.largestPrefixSize(keyLength: DiskEntryFormat.maximumKeyLength)
        guard let prefix = DiskFiles.readPrefix(path, count: headerAndKey) else { return .gone }
        return prefix.bytes.withUnsafeBytes { raw -> ScannedFile in
            guard let header = DiskEntryFormat.decodeHeader(raw), header.fileSize == prefix.size else {
                return .corrupt
            }
            let key = UnsafeRawBufferPointer(
                rebasing: raw[header.keyStart..<(header.keyStart + header.keyLength)]
            )
            guard KeyDigest(of: key) == digest else { return .corrupt }
            return .entry(
                digest: digest,
                fileSize: header.fileSize,
                logicalSize: header.keyLength + header.valueLength,
                expiry: header.expiry,
                modified: UInt32(clamping: max(1, prefix.modified))
            )
        }
    }
}
