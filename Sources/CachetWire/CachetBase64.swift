/// Standard base64 (RFC 4648, section 4) decoded, as memcached's meta commands send binary keys and HTTP Basic
/// sends credentials. No I/O, no Foundation.
public enum CachetBase64 {
    /// The bytes `text` encodes; padding (`=`) is optional. Nil for any character outside the alphabet.
    /// - Parameter text: the base64 characters.
    public static func decode(_ text: some Sequence<UInt8>) -> [UInt8]? {
        var bytes: [UInt8] = []
        var accumulator: UInt32 = 0
        var bits = 0
        for character in text {
            let value: UInt8
            switch character {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = character - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = character - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = character - UInt8(ascii: "0") + 52
            case UInt8(ascii: "+"): value = 62
            case UInt8(ascii: "/"): value = 63
            case UInt8(ascii: "="): continue
            default: return nil
            }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        return bytes
    }
}
