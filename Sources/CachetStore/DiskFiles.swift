#if canImport(Glibc)
import Glibc
#endif

/// Small POSIX file helpers for the disk tier. Each returns `errno` on failure rather than throwing, so
/// the caller decides whether a failure is an error to count or an absent file.
enum DiskFiles {
    enum ReadResult {
        case bytes([UInt8])
        case missing
        case failed(Int32)
    }

    /// Reads a whole file.
    static func read(_ path: String) -> ReadResult {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return errno == ENOENT ? .missing : .failed(errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .failed(errno) }
        let size = Int(info.st_size)
        var bytes = [UInt8](repeating: 0, count: size)
        var done = 0
        while done < size {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + done, size - done) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return .failed(errno) }
            if n == 0 { break }
            done += n
        }
        if done < size { bytes.removeSubrange(done...) }
        return .bytes(bytes)
    }

    /// Reads at most `count` bytes from the start of a file, and its size and modification time.
    static func readPrefix(_ path: String, count: Int) -> (bytes: [UInt8], size: Int, modified: Int)? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        var bytes = [UInt8](repeating: 0, count: min(count, Int(info.st_size)))
        let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n >= 0 else { return nil }
        if n < bytes.count { bytes.removeSubrange(n...) }
        return (bytes, Int(info.st_size), Int(info.st_mtim.tv_sec))
    }

    /// Writes `bytes` to `temporary`, then renames it over `path`, so readers see the old file or the new
    /// one, never part of either. Returns nil on success, or the errno of the failing step (the temporary
    /// file is removed).
    static func replace(_ path: String, with bytes: [UInt8], temporary: String) -> Int32? {
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return errno }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, bytes.count - written) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 {
                let code = n < 0 ? errno : ENOSPC
                close(fd)
                unlink(temporary)
                return code
            }
            written += n
        }
        if close(fd) != 0 {
            let code = errno
            unlink(temporary)
            return code
        }
        if rename(temporary, path) != 0 {
            let code = errno
            unlink(temporary)
            return code
        }
        return nil
    }

    /// Deletes a file; true when it is gone (deleted, or there was none: a missing or non-directory path
    /// component). On false, `errno` says why.
    static func remove(_ path: String) -> Bool {
        unlink(path) == 0 || errno == ENOENT || errno == ENOTDIR
    }

    /// Creates a directory and its parents; true if it exists afterwards.
    @discardableResult
    static func makeDirectory(_ path: String) -> Bool {
        if mkdir(path, 0o755) == 0 || errno == EEXIST { return true }
        guard errno == ENOENT, let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return false }
        guard makeDirectory(String(path[..<slash])) else { return false }
        return mkdir(path, 0o755) == 0 || errno == EEXIST
    }

    /// Whether `path` names a directory (following symbolic links).
    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }

    /// Names in a directory, without `.` and `..`.
    static func list(_ path: String) -> [String] {
        guard let directory = opendir(path) else { return [] }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Writes all of `bytes` at `offset` of an open file (`pwrite`, retried on EINTR and short writes); the
    /// errno on failure (ENOSPC when the file takes nothing).
    static func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int) -> Int32? {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return n < 0 ? errno : ENOSPC }
            done += n
        }
        return nil
    }

    static func describe(_ code: Int32) -> String { String(cString: strerror(code)) }
}
