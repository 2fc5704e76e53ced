/// An error opening or using a storage tier.
///
/// `Code` wraps a private enum, so adding a code breaks no caller.
public struct CachetStoreError: Error, Sendable, CustomStringConvertible {
    /// What kind of error this is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        fileprivate enum Base: Hashable, Sendable {
            case directoryLocked
            case directoryUnusable
            case fileUnusable
            case corrupt
            case writeRefused
        }

        fileprivate var base: Base
        private init(_ base: Base) { self.base = base }

        /// Another running node holds the data directory's lock file.
        public static let directoryLocked = Code(.directoryLocked)
        /// The data directory cannot be created, read or written.
        public static let directoryUnusable = Code(.directoryUnusable)
        /// An entry file cannot be read or written.
        public static let fileUnusable = Code(.fileUnusable)
        /// An entry file failed its checks.
        public static let corrupt = Code(.corrupt)

        /// A write, delete or clear was refused because it could be undone by a restart: the disk journal
        /// is full of keys whose stale files cannot be deleted, or cannot be written.
        public static let writeRefused = Code(.writeRefused)

        /// The code's name.
        public var description: String {
            switch base {
            case .directoryLocked: return "directoryLocked"
            case .directoryUnusable: return "directoryUnusable"
            case .fileUnusable: return "fileUnusable"
            case .corrupt: return "corrupt"
            case .writeRefused: return "writeRefused"
            }
        }
    }

    /// What kind of error this is.
    public var code: Code
    /// What went wrong and what to do.
    public var message: String
    /// The `errno` underneath, if any.
    public var errorNumber: Int32?

    /// Creates an error.
    /// - Parameters:
    ///   - code: the kind.
    ///   - message: the explanation.
    ///   - errorNumber: the `errno` underneath.
    public init(code: Code, message: String, errorNumber: Int32? = nil) {
        self.code = code
        self.message = message
        self.errorNumber = errorNumber
    }

    /// The message.
    public var description: String { message }
}
