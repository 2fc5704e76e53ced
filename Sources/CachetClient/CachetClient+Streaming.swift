import CachetWire

#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif

#if canImport(Glibc)
import Glibc
#endif

/// Values of any size: stored in parts (`Protocol/PROTOCOL.md`, "PUT in parts") and read back as a stream of
/// ranges, so that neither side ever holds more than a part of the value.
extension CachetClient {
    /// The bytes of one part a streamed PUT sends, and of one range a stream reads: 1 MiB.
    public static let defaultPartSize = 1 << 20

    /// Stores the contents of the file at `url` under `key`, read and sent a part at a time, so that a file
    /// of any size is stored in bounded memory (the node keeps such a value on its disk tier). Readers see
    /// the key's older value until the last part has arrived, then the whole new one. A file no larger than
    /// one part is sent in one ordinary PUT.
    ///
    /// ```swift
    /// try await client.put("video:42", contentsOf: fileURL, ttl: .seconds(3600))
    /// ```
    /// - Parameters:
    ///   - key: 1 to 4096 bytes of UTF-8.
    ///   - url: a file URL.
    ///   - ttl: how long the entry lives; nil for no expiry.
    ///   - partSize: bytes per part; at least 4 KiB, and less than the node's `--max-frame` (the default is cut to fit
    ///     `Configuration.maximumFrameLength`).
    ///   - progress: called after each part with the bytes sent so far and the file's length.
    /// - Throws: ``CachetClientError``: `file` when the file cannot be read, `tooLarge` when the node cannot
    ///   hold the value (or has no disk tier for a value in parts), the errors of
    ///   ``put(_:value:ttl:)-(String,_,_)``.
    public func put(
        _ key: String,
        contentsOf url: URL,
        ttl: Duration? = nil,
        partSize: Int = CachetClient.defaultPartSize,
        progress: (@Sendable (Int, Int) -> Void)? = nil
    ) async throws(CachetClientError) {
        let path = url.path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Self.fileError("cannot open \(path)", errno) }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw Self.fileError("cannot read \(path)", errno) }
        let length = Int(info.st_size)
        let chunks = FileChunks(fd: fd, path: path, length: length, partSize: max(4096, partSize))
        try await put(Array(key.utf8), from: chunks, length: length, ttl: ttl, partSize: partSize, progress: progress)
    }

    /// Stores the bytes `chunks` yields under `key`, `length` bytes in all, sent in parts as they come (any
    /// `AsyncSequence` of byte arrays: a file, a socket, a generator). The value is stored once its last
    /// byte has arrived; the key keeps its older value until then, and the upload is given up (nothing
    /// stored) when `chunks` ends early or yields more, throws, or the task is cancelled.
    ///
    /// ```swift
    /// try await client.put("video:42", from: chunks, length: n)
    /// ```
    /// - Parameters:
    ///   - key: 1 to 4096 bytes of UTF-8.
    ///   - chunks: the value's bytes, in any slicing.
    ///   - length: the value's length, announced with the first part.
    ///   - ttl: how long the entry lives; nil for no expiry.
    ///   - partSize: bytes per part.
    ///   - progress: called after each part with the bytes sent so far and `length`.
    public func put<Chunks: AsyncSequence>(
        _ key: String,
        from chunks: Chunks,
        length: Int,
        ttl: Duration? = nil,
        partSize: Int = CachetClient.defaultPartSize,
        progress: (@Sendable (Int, Int) -> Void)? = nil
    ) async throws(CachetClientError) where Chunks.Element == [UInt8] {
        try await put(Array(key.utf8), from: chunks, length: length, ttl: ttl, partSize: partSize, progress: progress)
    }

    /// ``put(_:from:length:ttl:partSize:progress:)-(String,_,_,_,_,_)`` for a key of bytes.
    public func put<Chunks: AsyncSequence>(
        _ key: [UInt8],
        from chunks: Chunks,
        length: Int,
        ttl: Duration? = nil,
        partSize: Int = CachetClient.defaultPartSize,
        progress: (@Sendable (Int, Int) -> Void)? = nil
    ) async throws(CachetClientError) where Chunks.Element == [UInt8] {
        let seconds = try ClientRequest.ttlSeconds(ttl)
        try withBytes(key) { (key) throws(CachetClientError) in try ClientRequest.validate(key: key) }
        guard length >= 0 else {
            throw CachetClientError(code: .badRequest, message: "a value's length cannot be negative (\(length))")
        }
        let partSize = try Self.checkedPartSize(
            partSize,
            key: key,
            maximumFrameLength: configuration.maximumFrameLength
        )
        let upload = UInt64.random(in: 1...UInt64.max)
        var sent = 0
        var pending: [UInt8] = []
        pending.reserveCapacity(min(length, partSize))
        var iterator = chunks.makeAsyncIterator()
        while true {
            let chunk: [UInt8]?
            do {
                chunk = try await iterator.next()
            } catch {
                throw CachetClientError(
                    code: .file,
                    message:
                        "the value's source failed after \(sent + pending.count) bytes: \(error); nothing was stored",
                    underlying: error
                )
            }
            guard let chunk else { break }
            guard sent + pending.count + chunk.count <= length else {
                throw CachetClientError(
                    code: .badRequest,
                    message: "the value's source yields more than the announced \(length) bytes; nothing was stored"
                )
            }
            pending += chunk
            while pending.count >= partSize {
                // A value of one part at most goes in an ordinary PUT, and the last part (which ends the
                // upload) after the source ends, below.
                if length <= partSize || sent + pending.count == length && pending.count <= partSize { break }
                let part = Array(pending[0..<partSize])
                pending.removeFirst(partSize)
                try await sendPart(key, upload: upload, total: length, offset: sent, bytes: part, ttl: seconds)
                sent += part.count
                progress?(sent, length)
            }
        }
        guard sent + pending.count == length else {
            throw CachetClientError(
                code: .badRequest,
                message: "the value's source ended after \(sent + pending.count) of the announced \(length) bytes; "
                    + "nothing was stored"
            )
        }
        if sent == 0 {
            // Small enough for one frame: a plain PUT, which any node takes.
            try await put(key: key, value: pending, ttl: ttl, lease: .none)
        } else {
            try await sendPart(key, upload: upload, total: length, offset: sent, bytes: pending, ttl: seconds)
        }
        progress?(length, length)
    }

    private func sendPart(
        _ key: [UInt8],
        upload: UInt64,
        total: Int,
        offset: Int,
        bytes: [UInt8],
        ttl: UInt32
    ) async throws(CachetClientError) {
        try CachetClient.throwIfCancelled()
        var value = CachetUploadPart.encodeHeader(upload: upload, total: UInt64(total), offset: UInt64(offset))
        value += bytes
        let (status, body, node) = try await execute(key: key, value: value, opcode: .put, ttl: ttl, lease: .part)
        guard status == .ok else {
            var error = statusError(status, body: body, opcode: .put, node: node)
            error.message += " (part at byte \(offset) of \(total); nothing was stored)"
            throw error
        }
    }

    /// The value under `key` as a stream of byte arrays, read a range of `partSize` bytes at a time as the
    /// consumer asks for them (back-pressured: one range is read ahead of the one the consumer has), so that
    /// a value of any size is read in bounded memory. Each range carries the value's tag: if the key is written while it is read, the
    /// stream throws `valueChanged` rather than yield bytes of two values. A key with no value throws
    /// `notFound` on the first iteration.
    ///
    /// ```swift
    /// for try await chunk in client.stream("video:42") { ... }
    /// ```
    public func stream(_ key: String, partSize: Int = CachetClient.defaultPartSize) -> CachetValueStream {
        CachetValueStream(client: self, key: Array(key.utf8), partSize: partSize)
    }

    /// ``stream(_:partSize:)-(String,_)`` for a key of bytes.
    public func stream(_ key: [UInt8], partSize: Int = CachetClient.defaultPartSize) -> CachetValueStream {
        CachetValueStream(client: self, key: key, partSize: partSize)
    }

    /// Writes the value under `key` to the file at `url` (created or truncated), read as a stream
    /// (``stream(_:partSize:)-(String,_)``) so that a value of any size is written in bounded memory.
    /// - Parameters:
    ///   - progress: called after each range with the bytes written so far and the value's length.
    /// - Returns: the bytes written, or nil when the key has no value (the file is then not created).
    @discardableResult
    public func get(
        _ key: String,
        into url: URL,
        partSize: Int = CachetClient.defaultPartSize,
        progress: (@Sendable (Int, Int) -> Void)? = nil
    ) async throws(CachetClientError) -> Int? {
        var iterator = stream(key, partSize: partSize).makeAsyncIterator()
        var fd: Int32 = -1
        defer { if fd >= 0 { Glibc.close(fd) } }
        var written = 0
        while true {
            let chunk: [UInt8]?
            do {
                chunk = try await iterator.next()
            } catch {
                if fd < 0 && error.code == .notFound { return nil }
                throw error
            }
            if fd < 0 {
                fd = open(url.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
                guard fd >= 0 else { throw Self.fileError("cannot create \(url.path)", errno) }
            }
            guard let chunk else { return written }
            var done = 0
            while done < chunk.count {
                let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw Self.fileError("cannot write \(url.path)", n < 0 ? errno : ENOSPC) }
                done += n
            }
            written += chunk.count
            progress?(written, iterator.totalLength ?? written)
        }
    }

    static func checkedPartSize(_ partSize: Int, key: [UInt8], maximumFrameLength: Int) throws(CachetClientError) -> Int
    {
        let overhead =
            CachetProtocol.headerSize + CachetProtocol.putBodyPrefixSize + key.count + CachetUploadPart.headerSize
        // The default is cut to what one frame holds under the configured limit (a node whose `--max-frame`
        // is below 1 MiB); a size the caller chose is kept or refused.
        let partSize = partSize == defaultPartSize ? min(partSize, maximumFrameLength - overhead) : partSize
        guard partSize >= 4096, partSize + overhead <= maximumFrameLength else {
            throw CachetClientError(
                code: .badRequest,
                message: "part size \(partSize) must be at least 4096 bytes and fit one frame with the key "
                    + "(at most \(maximumFrameLength - overhead) bytes under Configuration.maximumFrameLength)"
            )
        }
        return partSize
    }

    static func fileError(_ what: String, _ code: Int32) -> CachetClientError {
        CachetClientError(code: .file, message: "\(what): \(String(cString: strerror(code)))")
    }
}

/// A value read as a stream of ranges: ``CachetClient/stream(_:partSize:)-(String,_)``.
public struct CachetValueStream: AsyncSequence, Sendable {
    /// Each element is the next bytes of the value.
    public typealias Element = [UInt8]
    /// Reading fails with a ``CachetClientError``.
    public typealias Failure = CachetClientError

    let client: CachetClient
    let key: [UInt8]
    let partSize: Int

    /// An iterator reading one range per call.
    public func makeAsyncIterator() -> Iterator {
        Iterator(client: client, key: key, partSize: Swift.max(1, partSize))
    }

    /// Reads the next range each time it is asked.
    public struct Iterator: AsyncIteratorProtocol {
        let client: CachetClient
        let key: [UInt8]
        let partSize: Int
        var offset = 0
        /// The value's length, once the first range has been read.
        public private(set) var totalLength: Int?
        var tag: UInt64?
        /// The range after the one last returned, asked for as that one was returned (one read ahead, so
        /// that the node reads it while the consumer uses the bytes before it).
        var ahead: (offset: Int, task: Task<CachetValueSlice?, any Error>)?

        /// The next bytes of the value; nil after its last byte.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws(CachetClientError) -> [UInt8]? {
            if let totalLength, offset >= totalLength { return nil }
            try CachetClient.throwIfCancelled()
            let read: CachetValueSlice?
            if let ahead, ahead.offset == offset {
                self.ahead = nil
                do {
                    read = try await ahead.task.value
                } catch {
                    throw error as? CachetClientError
                        ?? CachetClientError(code: .serverError, message: "\(error)", underlying: error)
                }
            } else {
                read = try await client.get(
                    key: key,
                    range: CachetValueRange(offset: UInt64(offset), length: UInt64(partSize))
                )
            }
            guard let slice = read else {
                throw CachetClientError(
                    code: tag == nil ? .notFound : .valueChanged,
                    message: tag == nil
                        ? "no value under the key"
                        : "the value under the key was deleted after \(offset) bytes were read"
                )
            }
            if let tag, slice.tag != tag || slice.totalLength != totalLength {
                throw CachetClientError(
                    code: .valueChanged,
                    message:
                        "the value under the key was replaced after \(offset) of its \(totalLength ?? 0) bytes were read"
                )
            }
            tag = slice.tag
            totalLength = slice.totalLength
            if slice.bytes.isEmpty && offset < slice.totalLength {
                throw CachetClientError(
                    code: .protocolViolation,
                    message: "a range read returned no bytes before the value's end"
                )
            }
            offset += slice.bytes.count
            if offset < slice.totalLength {
                let (client, key) = (self.client, self.key)
                let range = CachetValueRange(offset: UInt64(offset), length: UInt64(partSize))
                ahead = (
                    offset,
                    Task { () async throws -> CachetValueSlice? in try await client.get(key: key, range: range) }
                )
            }
            return slice.bytes.isEmpty ? nil : slice.bytes
        }

        /// ``next(isolation:)`` from any context.
        public mutating func next() async throws(CachetClientError) -> [UInt8]? {
            try await next(isolation: nil)
        }
    }
}

/// A file read a part at a time (``CachetClient/put(_:contentsOf:ttl:partSize:progress:)``).
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = [UInt8]
    let fd: Int32
    let path: String
    let length: Int
    let partSize: Int

    func makeAsyncIterator() -> Iterator { Iterator(chunks: self) }

    struct Iterator: AsyncIteratorProtocol {
        let chunks: FileChunks
        var offset = 0

        mutating func next() async throws -> [UInt8]? {
            guard offset < chunks.length else { return nil }
            var bytes = [UInt8](repeating: 0, count: Swift.min(chunks.partSize, chunks.length - offset))
            var done = 0
            while done < bytes.count {
                let n = bytes.withUnsafeMutableBytes {
                    pread(chunks.fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done))
                }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else {
                    throw CachetClient.fileError(
                        n == 0
                            ? "\(chunks.path) ended at byte \(offset + done), shorter than when it was opened"
                            : "cannot read \(chunks.path)",
                        n < 0 ? errno : EIO
                    )
                }
                done += n
            }
            offset += bytes.count
            return bytes
        }
    }
}

extension CachetClient {
    /// Throws `cancelled` when the current task is cancelled.
    static func throwIfCancelled() throws(CachetClientError) {
        if Task.isCancelled { throw CachetClientError(code: .cancelled, message: "the task was cancelled") }
    }
}
