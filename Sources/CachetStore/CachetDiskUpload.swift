import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A value being received in parts (a chunked PUT, `Protocol/PROTOCOL.md`, "PUT in parts"): written as it
/// arrives to a staging file under `uploads/` in the layout of an entry file in blocks
/// (``BlockEntryFormat``), so that it is never whole in memory, and made the key's entry file, at once and
/// whole, when its last part has arrived (``CachetDiskWorker/submitUploadCommit(_:completion:)``). Until
/// then readers see the key's older value; an upload given up is deleted
/// (``CachetDiskWorker/abortUpload(_:)``), and whatever a crash leaves in `uploads/` is deleted when the
/// tier opens.
///
/// Made by ``CachetDiskWorker/beginUpload(key:total:expiry:)`` on any thread; its state changes on the disk
/// queue only.
public final class CachetDiskUpload: @unchecked Sendable {
    /// The key the value is for.
    public let key: [UInt8]
    /// The value's whole length, announced by its first part.
    public let total: Int
    /// Absolute expiry, 0 for never.
    public let expiry: UInt32
    let digest: KeyDigest
    let path: String
    let level: Int32
    var fd: Int32 = -1
    /// The value's bytes of the block being filled.
    var block: [UInt8] = []
    /// Value bytes taken so far.
    var received = 0
    /// Bytes of blocks written so far.
    var payloadLength = 0
    var table: [UInt8] = []
    var tag = CachetValueTag()
    var compressed = false
    /// Why a write failed; the upload is then of no use.
    var failure: String?
    var blockCount: Int { BlockEntryFormat.blockCount(valueLength: total, blockSize: BlockEntryFormat.blockSize) }
    /// Where the first block goes: after the header, the key and the block table.
    var payloadStart: Int {
        BlockEntryFormat.headerSize + key.count + BlockEntryFormat.tableSize(blockCount: blockCount)
    }

    init(key: [UInt8], total: Int, expiry: UInt32, path: String, level: Int32) {
        self.key = key
        self.total = total
        self.expiry = expiry
        self.digest = key.withUnsafeBytes { KeyDigest(of: $0) }
        self.path = path
        self.level = level
    }

    deinit {
        if fd >= 0 { Glibc.close(fd) }
    }

    /// Takes the next bytes of the value: fills the current block, writing each block once it is full.
    /// Returns why it failed, or nil.
    func append(_ bytes: UnsafeRawBufferPointer) -> String? {
        if let failure { return failure }
        guard received + bytes.count <= total else { return "more bytes than the announced length" }
        if fd < 0 {
            fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else { return fail("cannot create \(path): \(DiskFiles.describe(errno))") }
            block.reserveCapacity(min(total, BlockEntryFormat.blockSize))
            table.reserveCapacity(BlockEntryFormat.tableSize(blockCount: blockCount))
        }
        tag.add(bytes)
        received += bytes.count
        var offset = 0
        while offset < bytes.count {
            let take = min(bytes.count - offset, BlockEntryFormat.blockSize - block.count)
            block.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + take)]))
            offset += take
            if block.count == BlockEntryFormat.blockSize, let failure = writeBlock() { return failure }
        }
        return nil
    }

    /// Writes the block being filled (compressed when that pays) after the ones before it.
    private func writeBlock() -> String? {
        let (stored, crc) = block.withUnsafeBufferPointer { BlockEntryFormat.storeBlock($0, level: level) }
        if stored != nil { compressed = true }
        if let failure = DiskFiles.writeAll(fd, stored ?? block, at: payloadStart + payloadLength) {
            return fail("cannot write \(path): \(DiskFiles.describe(failure))")
        }
        BlockEntryFormat.appendTableEntry(storedLength: stored?.count ?? block.count, crc: crc, to: &table)
        payloadLength += stored?.count ?? block.count
        block.removeAll(keepingCapacity: true)
        return nil
    }

    /// Writes the last block, the table and the header: the file is then a whole entry file, ready to be
    /// renamed into place. Returns its size, or why it failed.
    func finish() -> Result<Int, UploadFailure> {
        if let failure { return .failure(UploadFailure(message: failure)) }
        guard received == total else { return .failure(UploadFailure(message: "the value is not complete")) }
        if fd < 0 {
            // An empty value: nothing was appended.
            fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                return .failure(UploadFailure(message: fail("cannot create \(path): \(DiskFiles.describe(errno))")))
            }
        }
        if !block.isEmpty, let failure = writeBlock() { return .failure(UploadFailure(message: failure)) }
        DiskEntryFormat.append(table.withUnsafeBytes { DiskEntryFormat.crc32($0) }, to: &table)
        let header = BlockEntryFormat.encodeHeader(
            key: key,
            expiry: expiry,
            valueLength: total,
            payloadLength: payloadLength,
            blockSize: BlockEntryFormat.blockSize,
            tag: tag.value
        )
        if let failure = DiskFiles.writeAll(fd, table, at: header.count) ?? DiskFiles.writeAll(fd, header, at: 0) {
            return .failure(UploadFailure(message: fail("cannot write \(path): \(DiskFiles.describe(failure))")))
        }
        Glibc.close(fd)
        fd = -1
        return .success(payloadStart + payloadLength)
    }

    /// Closes and deletes the staging file.
    func discard() {
        // A write queued after this one finds it given up, rather than creating the file again.
        failure = "the upload was given up"
        if fd >= 0 {
            Glibc.close(fd)
            fd = -1
        }
        unlink(path)
        block = []
        table = []
    }

    private func fail(_ message: String) -> String {
        failure = message
        return message
    }

    struct UploadFailure: Error {
        var message: String
    }
}

/// Uploads: staging files and their commit.
extension CachetDiskStore {
    /// The directory of the staging files of uploads in progress.
    static func uploadDirectory(in root: String) -> String { root + "/uploads" }

    /// Deletes what uploads in progress when the node stopped left behind.
    static func removeLeftoverUploads(in root: String) -> Int {
        let directory = uploadDirectory(in: root)
        var removed = 0
        for name in DiskFiles.list(directory) where DiskFiles.remove(directory + "/" + name) { removed += 1 }
        return removed
    }

    private static let uploadSerial = Atomic<UInt64>(0)

    /// A new upload's staging file, not created yet (its first part creates it).
    func makeUpload(key: [UInt8], total: Int, expiry: UInt32) -> CachetDiskUpload {
        let directory = Self.uploadDirectory(in: configuration.directory)
        _ = DiskFiles.makeDirectory(directory)
        let serial = Self.uploadSerial.add(1, ordering: .relaxed).newValue
        return CachetDiskUpload(
            key: key,
            total: total,
            expiry: expiry,
            path: directory + "/\(serial).upload",
            level: configuration.compressionLevel
        )
    }

    /// Makes a complete upload the key's entry file (renamed over any older one), indexes it and evicts
    /// least recently used entries over the limit; on the disk queue. On failure the key's older file is
    /// deleted too (its journal record already makes it a miss after a crash) and the error says why.
    func commitUpload(_ upload: CachetDiskUpload) -> CachetStoreError? {
        let digest = upload.digest
        let size: Int
        switch upload.finish() {
        case .success(let finished): size = finished
        case .failure(let failure):
            upload.discard()
            return failedCommit(digest, failure.message)
        }
        let outcome = io.withLock { _ -> CachetStoreError? in
            let (writable, closed) = state.withLock { ($0.statistics.writable, $0.closed) }
            guard !closed else {
                upload.discard()
                return CachetStoreError(code: .writeRefused, message: "the disk tier is closed")
            }
            guard writable, size + Self.indexRecordSize <= configuration.limit else {
                upload.discard()
                invalidate(digest)
                state.withLock { $0.statistics.errors += 1 }
                return CachetStoreError(
                    code: .writeRefused,
                    message: writable ? "the value does not fit --disk-limit" : "the data directory is not writable"
                )
            }
            let paths = path(for: digest)
            var result = rename(upload.path, paths.file)
            if result != 0 && errno == ENOENT {
                DiskFiles.makeDirectory(paths.directory)
                result = rename(upload.path, paths.file)
            }
            guard result == 0 else {
                let code = errno
                upload.discard()
                invalidate(digest)
                state.withLock { $0.statistics.errors += 1 }
                return CachetStoreError(
                    code: .writeRefused,
                    message: "cannot rename the upload into place: \(DiskFiles.describe(code))"
                )
            }
            state.withLock { state in
                state.index.upsert(
                    digest,
                    fileSize: size,
                    logicalSize: upload.key.count + upload.total,
                    expiry: upload.expiry
                )
                state.staleFiles.remove(digest)
                if upload.compressed { state.statistics.compressedWrites += 1 } else { state.statistics.rawWrites += 1 }
            }
            return nil
        }
        if outcome == nil { trimToLimit() }
        return outcome
    }

    private func failedCommit(_ digest: KeyDigest, _ message: String) -> CachetStoreError {
        io.withLock { _ in
            if !state.withLock({ $0.closed }) { invalidate(digest) }
        }
        state.withLock { $0.statistics.errors += 1 }
        warnFailure("an upload could not be stored", metadata: ["error.message": "\(message)"])
        return CachetStoreError(code: .writeRefused, message: "the upload could not be stored: \(message)")
    }
}
