/// Constants of Cachet wire protocol version 1. `Protocol/PROTOCOL.md` is the normative text.
public enum CachetProtocol {
    /// The protocol version this codec speaks.
    public static let version: UInt8 = 1
    /// Bytes of the big-endian length that precedes every payload.
    public static let lengthPrefixSize = 4
    /// Bytes of the fixed header at the start of every payload (version, opcode, flags/status, id).
    public static let headerSize = 8
    /// Bytes of the length prefix plus the fixed header.
    public static let frameOverhead = lengthPrefixSize + headerSize
    /// The smallest valid payload length: a header with an empty body.
    public static let minimumPayloadLength = headerSize
    /// The longest key, in bytes.
    public static let maximumKeyLength = 4096
    /// The default limit on a payload's length (64 MiB), which `--max-frame` changes.
    public static let defaultMaximumPayloadLength = 64 << 20
    /// Bytes of a PUT body before its key: ttl (u32) and key length (u16).
    public static let putBodyPrefixSize = 6
    /// Bytes of a GET or DEL body before its key: key length (u16).
    public static let keyBodyPrefixSize = 2
    /// Bytes of a CLEAR reply body: items (u64) and bytes (u64).
    public static let clearReplySize = 16
}
