#if canImport(Glibc)
import Glibc
#endif

/// The line of a memcached storage command, read only for the length it announces: the session's input grows
/// towards it while the command's data block arrives (``MemcacheSession/partialCommandLength``). The command
/// itself is decoded, and its errors found, by `MemcacheTextDecoder` once it is whole.
enum MemcacheStorageLine {
    /// The length ``MemcacheSession/partialCommandLength`` describes, read from the storage command's line at the front of
    /// `bytes` (`set`, `add`, `replace`, `append`, `prepend`, `cas`: the fifth token; `ms`: the third); 0 when
    /// the line is not whole or announces no data block.
    static func announcedLength(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard let base = bytes.baseAddress, let newline = memchr(base, 0x0a, bytes.count) else { return 0 }
        let lineLength = UnsafeRawPointer(newline) - base + 1
        var tokens: [Range<Int>] = []
        var index = 0
        while index < lineLength && tokens.count < 5 {
            while index < lineLength && (bytes[index] == 0x20 || bytes[index] == 0x0d || bytes[index] == 0x0a) {
                index += 1
            }
            let start = index
            while index < lineLength && bytes[index] != 0x20 && bytes[index] != 0x0d && bytes[index] != 0x0a {
                index += 1
            }
            if index > start { tokens.append(start..<index) }
        }
        guard let verb = tokens.first else { return 0 }
        let position: Int
        switch Array(bytes[verb]) {
        case Array("set".utf8), Array("add".utf8), Array("replace".utf8), Array("append".utf8),
            Array("prepend".utf8), Array("cas".utf8):
            position = 4
        case Array("ms".utf8):
            position = 2
        default:
            return 0
        }
        guard tokens.count > position, tokens[position].count <= 10 else { return 0 }
        var length = 0
        for byte in bytes[tokens[position]] {
            guard byte >= 0x30, byte <= 0x39 else { return 0 }
            length = length * 10 + Int(byte - 0x30)
        }
        return lineLength + length + 2
    }
}
