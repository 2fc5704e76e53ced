import Foundation

/// A directory under the system's temporary directory that tests own and remove.
public final class TemporaryDirectory: Sendable {
    /// The directory's absolute path.
    public let path: String

    /// Creates a fresh, empty directory.
    /// - Parameter prefix: the start of the directory's name, to tell tests apart.
    public init(prefix: String = "cachet-test") {
        var template = Array((NSTemporaryDirectory() + "/\(prefix)-XXXXXX").utf8CString)
        let created = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(created != nil, "mkdtemp failed: errno \(errno)")
        path = String(cString: created!)
    }

    /// A path inside the directory.
    /// - Parameter name: a relative name.
    /// - Returns: the joined path.
    public func appending(_ name: String) -> String { path + "/" + name }

    /// Removes the directory and everything below it.
    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }

    deinit { remove() }
}
