import Foundation

/// Paths in the repository, from this file's place in it.
enum DeployFiles {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// The absolute path of a file given relative to the repository's root.
    static func path(_ relative: String) -> String { root + "/" + relative }

    /// A repository file's text.
    static func text(_ relative: String) throws -> String {
        try String(contentsOfFile: path(relative), encoding: .utf8)
    }
}
