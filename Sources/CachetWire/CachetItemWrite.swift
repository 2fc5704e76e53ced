/// A write of an item with the ``CachetRequestFlags/item`` flag (`Protocol/PROTOCOL.md`, "Items: flags,
/// CAS and conditional writes"): what follows the key in such a PUT, `mode: u8 | flags: u32 | cas: u64 |
/// data`. memcached's storage, arithmetic and touch commands, each done at once on the key's owner.
public struct CachetItemWrite: Hashable, Sendable {
    /// What the write does.
    public enum Mode: UInt8, Sendable, CaseIterable {
        /// Stores the data, whatever the key holds.
        case set = 0
        /// Stores the data only if the key holds no value (NOT_STORED otherwise).
        case add = 1
        /// Stores the data only if the key holds a value (NOT_STORED otherwise).
        case replace = 2
        /// Adds the data after the value, keeping its flags and expiry (NOT_STORED without a value).
        case append = 3
        /// Adds the data before the value, keeping its flags and expiry (NOT_STORED without a value).
        case prepend = 4
        /// Stores the data only if the item's CAS unique is `cas` (EXISTS if it is another, NOT_FOUND without
        /// a value).
        case compareAndSwap = 5
        /// Adds the data's u64 to the value read as a decimal number, wrapping at 2^64 (NOT_FOUND without a
        /// value, BAD_REQUEST if it is not a number). With a second u64 in the data, a miss creates the item
        /// holding that number (with the PUT's TTL and the flags), answered with it.
        case increment = 6
        /// Subtracts the data's u64 from the value read as a decimal number, stopping at 0.
        case decrement = 7
        /// Sets the item's expiry to the PUT's TTL (NOT_FOUND without a value); no data.
        case touch = 8
        /// ``touch``, answered with the item as a GET with the `item` flag is; no data.
        case getAndTouch = 9
        /// Removes the item if its CAS unique is `cas`, or whatever it is when `cas` is 0 (EXISTS if it is
        /// another, NOT_FOUND without a value); no data.
        case delete = 10
    }

    /// What the write does.
    public var mode: Mode
    /// The client's flags for the stored item (ignored by the modes that keep the item's own).
    public var flags: UInt32
    /// For ``Mode/compareAndSwap``: the CAS unique the item must have; for the arithmetic modes and
    /// ``Mode/delete``, the one it must have unless 0; ignored otherwise.
    public var cas: UInt64
    /// The data's offsets in the buffer decoded from: the bytes to store, the delta (8 bytes) of the
    /// arithmetic modes, nothing for the touches.
    public var data: Range<Int>

    /// Bytes before the data: mode, flags and CAS.
    public static let headerSize = 13

    /// A write located in a buffer.
    public init(mode: Mode, flags: UInt32, cas: UInt64, data: Range<Int>) {
        self.mode = mode
        self.flags = flags
        self.cas = cas
        self.data = data
    }

    /// Parses the value field of a PUT with the ``CachetRequestFlags/item`` flag.
    /// - Throws: ``CachetWireError`` `malformedBody` for a field shorter than its 13 bytes, an unknown mode,
    ///   arithmetic data other than 8 bytes, or touch data that is not empty.
    public static func decode(in buffer: UnsafeRawBufferPointer, value: Range<Int>) throws(CachetWireError)
        -> CachetItemWrite
    {
        guard value.count >= headerSize else {
            throw CachetWireError(
                code: .malformedBody,
                message: "PUT of an item: \(value.count) bytes after the key, fewer than the 13 of mode, flags and CAS"
            )
        }
        guard let mode = Mode(rawValue: buffer[value.lowerBound]) else {
            throw CachetWireError(
                code: .malformedBody,
                message: "PUT of an item: mode \(buffer[value.lowerBound]) is not one of 0 to 10"
            )
        }
        let write = CachetItemWrite(
            mode: mode,
            flags: buffer.loadUnaligned(fromByteOffset: value.lowerBound + 1, as: UInt32.self).bigEndian,
            cas: buffer.loadUnaligned(fromByteOffset: value.lowerBound + 5, as: UInt64.self).bigEndian,
            data: (value.lowerBound + headerSize)..<value.upperBound
        )
        switch mode {
        case .increment, .decrement:
            guard write.data.count == 8 || write.data.count == 16 else {
                throw CachetWireError(
                    code: .malformedBody,
                    message:
                        "PUT of an item: an increment or decrement carries an 8-byte delta (and an 8-byte initial "
                        + "value), not \(write.data.count) bytes"
                )
            }
        case .touch, .getAndTouch, .delete:
            guard write.data.isEmpty else {
                throw CachetWireError(
                    code: .malformedBody,
                    message: "PUT of an item: a touch carries no data, not \(write.data.count) bytes"
                )
            }
        default:
            break
        }
        return write
    }

    /// The 13 bytes before the data.
    public static func encodeHeader(mode: Mode, flags: UInt32 = 0, cas: UInt64 = 0) -> [UInt8] {
        var bytes: [UInt8] = [mode.rawValue]
        withUnsafeBytes(of: flags.bigEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: cas.bigEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }

    /// The prefix of an OK reply that carries an item (a GET with the `item` flag, or ``Mode/getAndTouch``):
    /// `flags: u32 | cas: u64`, then the value.
    public static let itemReplyPrefixSize = 12

    /// Reads the flags and CAS unique before the value in an item reply's body; nil when it is too short.
    public static func decodeItemReply(_ body: [UInt8]) -> (flags: UInt32, cas: UInt64, valueStart: Int)? {
        guard body.count >= itemReplyPrefixSize else { return nil }
        let flags = body.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self).bigEndian }
        let cas = body.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 4, as: UInt64.self).bigEndian }
        return (flags, cas, itemReplyPrefixSize)
    }
}
