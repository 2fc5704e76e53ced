/// Top-level fields of a STATS reply's JSON object, read by name without decoding the object: what a member
/// reads of its peers' STATS (their membership's hash, and when it changed).
enum StatsBodyFields {
    /// The string value of a top-level field of a STATS JSON object, found by its name.
    static func string(_ name: String, in body: [UInt8]) -> String? {
        guard let value = value(of: name, in: body), value.first == UInt8(ascii: "\""),
            let end = value.dropFirst().firstIndex(of: UInt8(ascii: "\""))
        else { return nil }
        return String(decoding: value[(value.startIndex + 1)..<end], as: UTF8.self)
    }

    /// The value of a top-level number field of a STATS JSON object, found by its name.
    static func number(_ name: String, in body: [UInt8]) -> UInt64? {
        guard let value = value(of: name, in: body) else { return nil }
        let digits = value.prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        return UInt64(String(decoding: digits, as: UTF8.self))
    }

    /// The bytes after `"name":` in a STATS JSON object (its first occurrence), to the end of the body.
    private static func value(of name: String, in body: [UInt8]) -> ArraySlice<UInt8>? {
        let pattern = Array("\"\(name)\":".utf8)
        guard body.count > pattern.count else { return nil }
        for start in 0...(body.count - pattern.count) where body[start..<start + pattern.count].elementsEqual(pattern) {
            return body[(start + pattern.count)...]
        }
        return nil
    }
}
