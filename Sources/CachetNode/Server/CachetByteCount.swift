/// Parses byte counts written as flags: `1048576`, `512KiB`, `256MiB`, `2GiB`, `1TiB` (also `K`, `M`, `G`,
/// `KB`, `MB`, `GB`, all powers of 1024, case-insensitive).
public enum CachetByteCount {
    /// Parses a byte count.
    /// - Parameter text: digits with an optional unit.
    /// - Returns: the number of bytes.
    /// - Throws: ``CachetNodeError`` `invalidConfiguration` when the text is not a byte count.
    public static func parse(_ text: String) throws(CachetNodeError) -> Int {
        let trimmed = text.trimmingSpaces()
        let digits = trimmed.prefix { $0.isASCII && $0.isNumber }
        let unit = String(trimmed.dropFirst(digits.count)).trimmingSpaces().lowercased()
        guard !digits.isEmpty, let number = Int(digits) else {
            throw CachetNodeError(
                code: .invalidConfiguration,
                message: "'\(text)' is not a byte count (examples: 1048576, 512KiB, 256MiB, 2GiB)"
            )
        }
        let shift: Int
        switch unit {
        case "", "b": shift = 0
        case "k", "kb", "kib": shift = 10
        case "m", "mb", "mib": shift = 20
        case "g", "gb", "gib": shift = 30
        case "t", "tb", "tib": shift = 40
        default:
            throw CachetNodeError(
                code: .invalidConfiguration,
                message: "unknown unit '\(unit)' in '\(text)' (use KiB, MiB, GiB or TiB)"
            )
        }
        let (result, overflow) = number.multipliedReportingOverflow(by: 1 << shift)
        guard !overflow else {
            throw CachetNodeError(code: .invalidConfiguration, message: "'\(text)' is too large")
        }
        return result
    }
}

extension String {
    fileprivate func trimmingSpaces() -> Substring {
        var slice = self[...]
        while slice.first == " " { slice.removeFirst() }
        while slice.last == " " { slice.removeLast() }
        return slice
    }
}
