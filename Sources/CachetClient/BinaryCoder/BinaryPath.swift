/// A coding path as the containers keep it: the parent's and one key, made into an array only when asked
/// (an error, a type that reads `codingPath`), so that a field costs no array.
struct BinaryPath {
    var parent: [any CodingKey] = []
    var key: (any CodingKey)?

    var full: [any CodingKey] {
        guard let key else { return parent }
        return parent + [key]
    }

    func appending(_ key: any CodingKey) -> BinaryPath { BinaryPath(parent: full, key: key) }
}
