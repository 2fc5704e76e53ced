import CachetWire
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Files of any size: `put KEY @FILE` sends a file longer than one part in parts (`Protocol/PROTOCOL.md`,
/// "PUT in parts"), and `get KEY --out FILE` writes the value read by ranges, a part at a time, so neither
/// holds more than a part of the file in memory; both report their progress (``CachetCLISession/progress``).
extension CachetCLISession {
    /// Bytes per part sent and per range read: 1 MiB.
    static let partSize = 1 << 20

    /// Stores the file at `path` under `key`: in one PUT when it is no longer than a part, else in parts (or,
    /// on a node without a disk tier, which takes no parts, in one PUT when it fits a frame: the node refuses
    /// one longer than its `--large-value`).
    func putFile(key: [UInt8], path: String, ttl: UInt32, lines: inout [String]) throws(CachetCLIError) -> Outcome {
        let file = try Self.openFile(path)
        defer { close(file.descriptor) }
        let length = file.length
        guard length > Self.partSize else {
            let value = try Self.read(file, at: 0, count: length)
            let reply = try send(.put(key: key, value: value, ttl: ttl), lines: &lines)
            return answer(reply, lines: &lines) { _ in "OK" }
        }
        let upload = UInt64.random(in: 1...UInt64.max)
        let partSize = try partLength(key: key, lines: &lines)
        var offset = 0
        while offset < length {
            let count = min(partSize, length - offset)
            let bytes = try Self.read(file, at: offset, count: count)
            let field =
                CachetUploadPart.encodeHeader(upload: upload, total: UInt64(length), offset: UInt64(offset)) + bytes
            let reply = try send(.put(key: key, value: field, ttl: ttl), flags: .part, lines: &lines)
            if offset == 0, reply.status == .tooLarge, length + key.count + 14 <= maximumReplyLength {
                // A first part refused for its length (a node without a disk tier takes no parts): a file that
                // fits one frame goes in one PUT, whose answer says what the node makes of it. The status
                // decides, never the message's words.
                let value = try Self.read(file, at: 0, count: length)
                let whole = try send(.put(key: key, value: value, ttl: ttl), lines: &lines)
                return answer(whole, lines: &lines) { _ in "OK" }
            }
            guard reply.status == .ok else {
                progress?.finish()
                lines.append(
                    "ERROR \(reply.status) at byte \(offset) of \(length): \(reply.bodyText) (nothing was stored)"
                )
                return .error
            }
            offset += count
            progress?.update(done: offset, total: length)
        }
        progress?.finish()
        lines.append("OK (\(length) bytes in \((length + partSize - 1) / partSize) parts)")
        return .ok
    }

    /// The bytes per part for `key`: a part, or less when the node's frames are shorter (its `--max-frame`,
    /// which STATS says): a longer frame would be refused and the connection closed.
    private func partLength(key: [UInt8], lines: inout [String]) throws(CachetCLIError) -> Int {
        var quiet: [String] = []
        let reply = try send(.stats, lines: &quiet)
        guard reply.status == .ok,
            let object = try? JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any],
            let maximumFrame = (object["max_frame"] as? NSNumber)?.intValue
        else { return Self.partSize }
        // A PUT's payload: the header, the TTL and key length, the key, the part's three fields, the bytes.
        let room = maximumFrame - CachetProtocol.headerSize - 6 - key.count - CachetUploadPart.headerSize
        return max(1, min(Self.partSize, room))
    }

    /// Writes the value under `key` (or bytes `range` of it) to the file at `path`, read by ranges of a part
    /// each, every one checked to come from the same value (its tag).
    func getToFile(
        key: [UInt8],
        path: String,
        range: CachetValueRange?,
        lines: inout [String]
    ) throws(CachetCLIError) -> Outcome {
        var offset = range?.offset ?? 0
        // Where the bytes end: the range's end, once the value's length is known no further than it.
        var end: UInt64? = range.flatMap { $0.length == CachetValueRange.toEnd ? nil : $0.offset &+ $0.length }
        var total: UInt64 = 0
        var tag: UInt64?
        var descriptor: Int32 = -1
        defer { if descriptor >= 0 { close(descriptor) } }
        var written = 0
        repeat {
            let wanted = min(UInt64(Self.partSize), (end ?? .max) - offset)
            let reply = try send(
                .rangedGet(key: key, range: CachetValueRange(offset: offset, length: wanted)),
                lines: &lines
            )
            if reply.status == .rangeNotSatisfiable, let (length, _, _) = CachetValueRange.decodeReply(reply.body) {
                lines.append("ERROR RANGE_NOT_SATISFIABLE: the range starts past the value's end (\(length) bytes)")
                return .error
            }
            guard reply.status == .ok, let (length, replyTag, start) = CachetValueRange.decodeReply(reply.body) else {
                progress?.finish()
                if reply.status == .notFound && tag != nil {
                    lines.append("ERROR: the value was deleted after \(written) bytes were written to \(path)")
                    return .error
                }
                return answer(reply, lines: &lines) { _ in "" }
            }
            if let tag, tag != replyTag || length != total {
                progress?.finish()
                lines.append(
                    "ERROR: the value was replaced after \(written) bytes were written to \(path); read it again"
                )
                return .error
            }
            if tag == nil {
                tag = replyTag
                total = length
                end = min(end ?? length, length)
                descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
                guard descriptor >= 0 else {
                    throw CachetCLIError(
                        code: .file,
                        message: "cannot write \(path): \(String(cString: strerror(errno)))"
                    )
                }
            }
            let bytes = reply.body[start...]
            try Self.write(bytes, to: descriptor, path: path)
            written += bytes.count
            offset += UInt64(bytes.count)
            progress?.update(done: written, total: Int((end ?? 0) - (range?.offset ?? 0)))
            if bytes.isEmpty && offset < end! {
                throw CachetCLIError(
                    code: .connection,
                    message: "the node answered a range with no bytes before its end"
                )
            }
        } while offset < end!
        progress?.finish()
        let of = range == nil ? "" : " of \(total)"
        lines.append("OK (\(written)\(of) bytes written to \(path))")
        return .ok
    }

    struct OpenFile {
        var descriptor: Int32
        var path: String
        var length: Int
    }

    static func openFile(_ path: String) throws(CachetCLIError) -> OpenFile {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw CachetCLIError(code: .file, message: "cannot read \(path): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT != S_IFDIR else {
            close(descriptor)
            throw CachetCLIError(code: .file, message: "cannot read \(path): it is a directory")
        }
        return OpenFile(descriptor: descriptor, path: path, length: Int(info.st_size))
    }

    static func read(_ file: OpenFile, at offset: Int, count: Int) throws(CachetCLIError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = bytes.withUnsafeMutableBytes {
                pread(file.descriptor, $0.baseAddress! + done, count - done, off_t(offset + done))
            }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let reason =
                    n == 0
                    ? "it ended at byte \(offset + done), shorter than when it was opened"
                    : String(cString: strerror(errno))
                throw CachetCLIError(code: .file, message: "cannot read \(file.path): \(reason)")
            }
            done += n
        }
        return bytes
    }

    static func write(_ bytes: ArraySlice<UInt8>, to descriptor: Int32, path: String) throws(CachetCLIError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + done, $0.count - done) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw CachetCLIError(
                    code: .file,
                    message: "cannot write \(path): \(String(cString: strerror(n < 0 ? errno : ENOSPC)))"
                )
            }
            done += n
        }
    }
}

/// A progress bar on a terminal's standard error: bytes done of the total, percent and rate, redrawn in
/// place at most ten times a second. The executable makes one only when standard error is a terminal, so
/// nothing is drawn into a pipe or a log.
public final class CachetCLIProgress {
    private let write: (String) -> Void
    private let started = DispatchTime.now()
    private var lastDrawn: UInt64 = 0
    private var drawn = false

    /// - Parameter write: where the bar's text goes (standard error).
    public init(write: @escaping (String) -> Void) {
        self.write = write
    }

    /// Redraws the bar.
    func update(done: Int, total: Int) {
        let now = DispatchTime.now().uptimeNanoseconds
        guard done >= total || now - lastDrawn >= 100_000_000 else { return }
        lastDrawn = now
        drawn = true
        write("\r" + Self.render(done: done, total: total, seconds: Double(now - started.uptimeNanoseconds) / 1e9))
    }

    /// Ends the bar's line, if one was drawn.
    func finish() {
        if drawn { write("\n") }
        drawn = false
    }

    /// The bar's text: `[#####.....]  50%  512.0 MiB / 1.0 GiB  250.3 MiB/s`.
    static func render(done: Int, total: Int, seconds: Double) -> String {
        let fraction = total > 0 ? min(1, Double(done) / Double(total)) : 1
        let width = 30
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        let rate = seconds > 0 ? Double(done) / seconds : 0
        let percent = String(format: "%3d%%", Int(fraction * 100))
        return "[\(bar)] \(percent)  \(bytes(done)) / \(bytes(total))  \(bytes(Int(rate)))/s"
    }

    static func bytes(_ count: Int) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f %@", value, units[unit])
    }
}
