import CChecksum
import COpenSSLCrypto
import CZlib

/// CRC-32 with zlib's polynomial and conventions (`crc32`), by carry-less multiplication where the processor
/// has it (`CChecksum`: 2.4 times zlib's speed with 16-byte registers, 9 times with AVX-512's; BENCHMARKS.md),
/// else zlib's.
/// What every block, table and header of the disk tier is checked with, so a range read of a large value
/// spends less on its check than on its copy.
enum CachetCRC32 {
    private static let folding = cachet_crc32_folding_available() != 0

    /// `crc` (0 to start) continued over `bytes`.
    static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count > 0 else { return crc }
        var crc = crc
        var offset = 0
        if folding, bytes.count >= 64 {
            let bulk = bytes.count & ~15
            crc = cachet_crc32_folded(crc, base, bulk)
            offset = bulk
        }
        while offset < bytes.count {
            let chunk = min(bytes.count - offset, 1 << 30)
            crc = UInt32(truncatingIfNeeded: CZlib.crc32(UInt(crc), base + offset, UInt32(chunk)))
            offset += chunk
        }
        return crc
    }

    /// zlib's CRC-32 alone, for tests that compare the two.
    static func zlibOnly(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return crc }
        var crc = crc
        var offset = 0
        while offset < bytes.count {
            let chunk = min(bytes.count - offset, 1 << 30)
            crc = UInt32(truncatingIfNeeded: CZlib.crc32(UInt(crc), base + offset, UInt32(chunk)))
            offset += chunk
        }
        return crc
    }
}

/// The SHA-256 of a key: the entry's identity on disk and in the disk index.
struct KeyDigest: Hashable {
    var a: UInt64
    var b: UInt64
    var c: UInt64
    var d: UInt64

    init(of key: UnsafeRawBufferPointer) {
        var bytes = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        withUnsafeMutableBytes(of: &bytes) { out in
            _ = SHA256(
                key.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? UnsafePointer(bitPattern: 1),
                key.count,
                out.baseAddress!.assumingMemoryBound(to: UInt8.self)
            )
        }
        (a, b, c, d) = bytes
    }

    init(a: UInt64, b: UInt64, c: UInt64, d: UInt64) {
        (self.a, self.b, self.c, self.d) = (a, b, c, d)
    }

    /// The 64 lower-case hex digits of the digest, in byte order.
    var hex: String {
        var words = (a, b, c, d)
        return withUnsafeBytes(of: &words) { bytes in
            let digits = Array("0123456789abcdef".utf8)
            var out = [UInt8]()
            out.reserveCapacity(64)
            for byte in bytes {
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 0x0f)])
            }
            return String(decoding: out, as: UTF8.self)
        }
    }

    /// Parses 64 hex digits.
    init?(hex: Substring) {
        guard hex.utf8.count == 64 else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(32)
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        var words = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        withUnsafeMutableBytes(of: &words) { $0.copyBytes(from: bytes) }
        (a, b, c, d) = words
    }
}

/// The layout of one entry file; `Protocol/DISK-FORMAT.md` is the normative description.
///
/// ```
/// offset  0  magic "CCHE"            4 bytes
/// offset  4  format version (1)      1 byte
/// offset  5  flags (bit 0: deflate)  1 byte
/// offset  6  key length              u16
/// offset  8  expiry (Unix s, 0 none) u32
/// offset 12  value length            u32  (uncompressed)
/// offset 16  payload length          u32  (as stored)
/// offset 20  CRC-32 of the value     u32  (uncompressed bytes)
/// offset 24  CRC-32 of bytes 0..<24 and the key   u32
/// offset 28  key, then payload
/// ```
/// All integers big-endian.
enum DiskEntryFormat {
    static let magic: [UInt8] = Array("CCHE".utf8)
    static let version: UInt8 = 1
    static let headerSize = 28
    static let flagDeflate: UInt8 = 1
    /// Version 1's flags bit 1: the item fields (``CachetItemFields``: flags u32, CAS u64) follow the key.
    static let flagFields: UInt8 = 2
    /// The longest key a file may hold (the wire protocol's limit); the start-up scan reads no further.
    static let maximumKeyLength = 4096
    /// The longest header of either version: what a reader takes before it knows the version.
    static let largestHeaderSize = BlockEntryFormat.headerSize

    /// The most bytes a file's header, key and item fields take, for a key of `keyLength` bytes: what to read
    /// of a file to decode its header.
    static func largestPrefixSize(keyLength: Int) -> Int {
        largestHeaderSize + keyLength + CachetItemFields.storedSize
    }

    /// Whether a file can hold a key and value of these lengths.
    static func canHold(keyLength: Int, valueLength: Int) -> Bool {
        (1...maximumKeyLength).contains(keyLength) && valueLength <= BlockEntryFormat.maximumValueLength
    }
    /// Compression must save at least this share of the value, or the value is stored raw.
    static let minimumSaving = 0.10
    /// Values longer than this are judged by compressing a sample first, so that already-compressed media
    /// (video, JPEG) does not pay for a full deflate that would be thrown away.
    static let sampleSize = 16 * 1024

    /// Deflates `input` at `level`; nil when zlib fails or the result does not save `minimumSaving`.
    static func deflate(_ input: UnsafeBufferPointer<UInt8>, level: Int32) -> [UInt8]? {
        var bound = compressBound(UInt(input.count))
        var compressed = [UInt8](repeating: 0, count: Int(bound))
        let result = compressed.withUnsafeMutableBufferPointer { out in
            compress2(out.baseAddress, &bound, input.baseAddress, UInt(input.count), level)
        }
        guard result == Z_OK, Double(bound) <= Double(input.count) * (1 - minimumSaving) else { return nil }
        compressed.removeSubrange(Int(bound)...)
        return compressed
    }

    /// `input` deflated at `level` when that saves ``minimumSaving`` (judged on a sample first for long
    /// inputs, so that media does not pay for a whole deflate), else nil: store it raw. Nil for inputs under
    /// 64 bytes and for level 0.
    static func compressIfWorthIt(_ input: UnsafeBufferPointer<UInt8>, level: Int32) -> [UInt8]? {
        guard level > 0 && input.count >= 64 else { return nil }
        if input.count > sampleSize * 2,
            deflate(UnsafeBufferPointer(rebasing: input[0..<sampleSize]), level: level) == nil
        {
            return nil
        }
        return deflate(input, level: level)
    }

    /// An entry file's header, of either version: 1 (one payload) or 2 (blocks, ``BlockEntryFormat``).
    struct Header: Equatable {
        /// 1 or 2.
        var version: UInt8 = DiskEntryFormat.version
        var flags: UInt8
        var keyLength: Int
        var expiry: UInt32
        var valueLength: Int
        var payloadLength: Int
        /// Version 1: the CRC-32 of the value; 0 in version 2, whose blocks carry their own.
        var valueCRC: UInt32
        var headerCRC: UInt32
        /// Version 2: the bytes of value in each block but the last; 0 in version 1.
        var blockSize: Int = 0
        /// Version 2: the value's tag (``CachetValueTag``), stored; 0 in version 1, where it is computed.
        var tag: UInt64 = 0
        /// Version 1: the item fields stored after the key, if any.
        var fields: CachetItemFields?

        /// Whether the value is stored in blocks (version 2).
        var isBlocked: Bool { version == BlockEntryFormat.version }
        /// Where the key starts: after the header of the file's version.
        var keyStart: Int { isBlocked ? BlockEntryFormat.headerSize : DiskEntryFormat.headerSize }
        /// Version 2: how many blocks the value takes.
        var blockCount: Int {
            isBlocked ? BlockEntryFormat.blockCount(valueLength: valueLength, blockSize: blockSize) : 0
        }
        /// The bytes of item fields after the key: 12 or 0.
        var fieldsLength: Int { fields == nil ? 0 : CachetItemFields.storedSize }
        /// Where the payload (version 2: the first block) starts.
        var payloadStart: Int {
            keyStart + keyLength + fieldsLength + (isBlocked ? BlockEntryFormat.tableSize(blockCount: blockCount) : 0)
        }
        var fileSize: Int { payloadStart + payloadLength }
    }

    /// The CRC-32 of `bytes` (zlib's), continuing `seed`.
    static func crc32(_ bytes: UnsafeRawBufferPointer, seed: UInt32 = 0) -> UInt32 {
        CachetCRC32.update(seed, bytes)
    }

    /// Builds a whole file: header, key, payload (compressed when that saves enough); in blocks
    /// (``BlockEntryFormat``) for a value of ``BlockEntryFormat/threshold`` bytes or more.
    ///
    /// The caller checks ``canHold(keyLength:valueLength:)`` first.
    /// An entry with item fields is written in version 1 whatever its length (version 2 has no room for them).
    static func encode(
        key: [UInt8],
        value: [UInt8],
        expiry: UInt32,
        fields: CachetItemFields? = nil,
        level: Int32
    ) -> (file: [UInt8], compressed: Bool) {
        if value.count >= BlockEntryFormat.threshold && fields == nil {
            return BlockEntryFormat.encode(key: key, value: value, expiry: expiry, level: level)
        }
        return encodeSingle(key: key, value: value, expiry: expiry, fields: fields, level: level)
    }

    /// Builds a whole file of version 1 (one payload), whatever the value's length: what every value was
    /// written as before version 2, and what shorter values still are.
    static func encodeSingle(
        key: [UInt8],
        value: [UInt8],
        expiry: UInt32,
        fields: CachetItemFields? = nil,
        level: Int32
    ) -> (file: [UInt8], compressed: Bool) {
        var payload = value
        var flags: UInt8 = fields == nil ? 0 : flagFields
        var stored: [UInt8] = []
        if let fields {
            append(fields.flags, to: &stored)
            append(fields.cas, to: &stored)
        }
        if let compressed = value.withUnsafeBufferPointer({ compressIfWorthIt($0, level: level) }) {
            payload = compressed
            flags |= flagDeflate
        }
        var file = [UInt8]()
        file.reserveCapacity(headerSize + key.count + payload.count)
        file += magic
        file.append(version)
        file.append(flags)
        append(UInt16(key.count), to: &file)
        append(expiry, to: &file)
        append(UInt32(value.count), to: &file)
        append(UInt32(payload.count), to: &file)
        append(value.withUnsafeBytes { crc32($0) }, to: &file)
        let headerCRC = file.withUnsafeBytes { head in
            key.withUnsafeBytes { key in stored.withUnsafeBytes { crc32($0, seed: crc32(key, seed: crc32(head))) } }
        }
        append(headerCRC, to: &file)
        file += key
        file += stored
        file += payload
        return (file, flags & flagDeflate != 0)
    }

    static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    static func read<T: FixedWidthInteger>(_ type: T.Type, _ bytes: UnsafeRawBufferPointer, at offset: Int) -> T {
        T(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    /// Parses and checks a header and the key after it.
    /// - Returns: the header, or nil when the bytes are not a valid entry header.
    static func decodeHeader(_ bytes: UnsafeRawBufferPointer) -> Header? {
        guard bytes.count >= 5, Array(bytes[0..<4]) == magic else { return nil }
        if bytes[4] == BlockEntryFormat.version { return BlockEntryFormat.decodeHeader(bytes) }
        guard bytes.count >= headerSize, bytes[4] == version else { return nil }
        var header = Header(
            flags: bytes[5],
            keyLength: Int(read(UInt16.self, bytes, at: 6)),
            expiry: read(UInt32.self, bytes, at: 8),
            valueLength: Int(read(UInt32.self, bytes, at: 12)),
            payloadLength: Int(read(UInt32.self, bytes, at: 16)),
            valueCRC: read(UInt32.self, bytes, at: 20),
            headerCRC: read(UInt32.self, bytes, at: 24)
        )
        let fieldsLength = header.flags & flagFields != 0 ? CachetItemFields.storedSize : 0
        guard header.flags & ~(flagDeflate | flagFields) == 0, (1...maximumKeyLength).contains(header.keyLength),
            bytes.count >= headerSize + header.keyLength + fieldsLength
        else {
            return nil
        }
        let computed = crc32(
            UnsafeRawBufferPointer(rebasing: bytes[headerSize..<(headerSize + header.keyLength + fieldsLength)]),
            seed: crc32(UnsafeRawBufferPointer(rebasing: bytes[0..<24]))
        )
        guard computed == header.headerCRC else { return nil }
        if fieldsLength > 0 {
            let at = headerSize + header.keyLength
            header.fields = CachetItemFields(
                flags: read(UInt32.self, bytes, at: at),
                cas: read(UInt64.self, bytes, at: at + 4)
            )
        }
        if header.flags & flagDeflate == 0 && header.payloadLength != header.valueLength { return nil }
        return header
    }

    /// Decompresses (if needed) and checks a payload against its header.
    /// - Returns: the value, or nil when it does not match its length or CRC.
    static func decodeValue(header: Header, payload: UnsafeRawBufferPointer) -> [UInt8]? {
        guard payload.count == header.payloadLength else { return nil }
        var value: [UInt8]
        if header.flags & flagDeflate != 0 {
            value = [UInt8](repeating: 0, count: header.valueLength)
            var length = UInt(header.valueLength)
            let result = value.withUnsafeMutableBufferPointer { out in
                uncompress(
                    out.baseAddress,
                    &length,
                    payload.baseAddress?.assumingMemoryBound(to: UInt8.self),
                    UInt(payload.count)
                )
            }
            guard result == Z_OK, Int(length) == header.valueLength else { return nil }
        } else {
            value = Array(payload)
        }
        guard value.withUnsafeBytes({ crc32($0) }) == header.valueCRC else { return nil }
        return value
    }
}
