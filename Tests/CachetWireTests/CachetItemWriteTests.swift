import CachetWire
import Testing

/// The value field of a PUT with the `item` flag (`Protocol/PROTOCOL.md`, "Items: flags, CAS and conditional
/// writes"): every mode read back from its header, the new CAS unique behind the mode's high bit, and the
/// data each mode must carry.
@Suite("Item writes: modes, new CAS uniques and options")
struct CachetItemWriteTests {
    /// Decodes `field` as it would sit after a key: two bytes of something else before it.
    static func decode(_ field: [UInt8]) throws -> (CachetItemWrite, [UInt8]) {
        let buffer: [UInt8] = [0xEE, 0xEE] + field
        return try buffer.withUnsafeBytes { bytes in
            let write = try CachetItemWrite.decode(in: bytes, value: 2..<bytes.count)
            return (write, Array(bytes[write.data]))
        }
    }

    /// The data each mode is valid with.
    static func data(for mode: CachetItemWrite.Mode) -> [UInt8] {
        switch mode {
        case .increment, .decrement: return [0, 0, 0, 0, 0, 0, 0, 5]
        case .touch, .getAndTouch, .delete: return []
        case .invalidate: return [4]
        case .metaGet: return CachetItemWrite.MetaGetOptions(vivify: true, recache: 30, vivifyTTL: 60).encoded
        default: return Array("value".utf8)
        }
    }

    @Test(arguments: CachetItemWrite.Mode.allCases)
    func everyModeDecodesWithAndWithoutANewCAS(_ mode: CachetItemWrite.Mode) throws {
        let data = Self.data(for: mode)
        let plain = try Self.decode(CachetItemWrite.encodeHeader(mode: mode, flags: 42, cas: 7) + data)
        #expect(plain.0.mode == mode && plain.0.flags == 42 && plain.0.cas == 7 && plain.0.newCAS == nil)
        #expect(plain.1 == data)
        let header = CachetItemWrite.encodeHeader(mode: mode, flags: 1, cas: 2, newCAS: 0xDEAD_BEEF)
        #expect(header.count == CachetItemWrite.headerSize + 8 && header[0] == mode.rawValue | 0x80)
        let withNew = try Self.decode(header + data)
        #expect(withNew.0.mode == mode && withNew.0.cas == 2 && withNew.0.newCAS == 0xDEAD_BEEF)
        #expect(withNew.1 == data, "the data starts after the new CAS unique")
    }

    @Test func badFieldsAreMalformed() {
        let header = { (mode: UInt8) in [mode] + [UInt8](repeating: 0, count: 12) }
        let bad: [(String, [UInt8])] = [
            ("too short", [0, 0, 0]),
            ("mode 16", header(16)),
            ("mode 16 with the new CAS bit", header(0x90) + [UInt8](repeating: 0, count: 8)),
            ("the new CAS bit without its 8 bytes", header(0x80) + [1, 2, 3]),
            ("invalidate without options", header(11)),
            ("invalidate with an unknown option", header(11) + [8]),
            ("invalidate with two bytes", header(11) + [4, 0]),
            ("meta-get with 8 bytes", header(13) + [UInt8](repeating: 0, count: 8)),
            ("meta-get with an unknown option", header(13) + [16] + [UInt8](repeating: 0, count: 8)),
            ("touch with data", header(8) + [1]),
        ]
        for (name, field) in bad {
            #expect(throws: CachetWireError.self, "\(name)") { try Self.decode(field) }
        }
    }

    @Test func metaGetOptionsRoundTrip() {
        let options = [
            CachetItemWrite.MetaGetOptions(),
            CachetItemWrite.MetaGetOptions(touch: true),
            CachetItemWrite.MetaGetOptions(touch: true, vivify: true, recache: .max, vivifyTTL: 1),
            CachetItemWrite.MetaGetOptions(vivify: true, recache: 0, vivifyTTL: 0x0102_0304),
            CachetItemWrite.MetaGetOptions(recache: 5, noBump: true),
            CachetItemWrite.MetaGetOptions(touch: true, idleTime: true),
        ]
        for option in options {
            let encoded = option.encoded
            #expect(encoded.count == 9)
            #expect(encoded.withUnsafeBytes { CachetItemWrite.MetaGetOptions.decode($0) } == option)
        }
        // An option bit the protocol does not define is refused.
        var unknown = CachetItemWrite.MetaGetOptions().encoded
        unknown[0] = 16
        #expect(unknown.withUnsafeBytes { CachetItemWrite.MetaGetOptions.decode($0) } == nil)
    }
}
