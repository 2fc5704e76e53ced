/// A command of memcached's meta protocol (memcached's `protocol.txt`, "Meta Commands"): `mg`, `ms`, `md`,
/// `ma`, `mn` or `me`, its key, its data block (`ms`) and its flags in the order sent (a reply returns the
/// flags it answers in that order). Offsets are into the decoded buffer.
public struct MemcacheMetaCommand: Hashable, Sendable {
    /// Which meta command.
    public enum Kind: Hashable, Sendable {
        /// `mg`: get.
        case get
        /// `ms`: set (and add, replace, append, prepend, cas).
        case set
        /// `md`: delete.
        case delete
        /// `ma`: arithmetic.
        case arithmetic
        /// `mn`: no-op, answered `MN`.
        case noop
        /// `me`: debug, the item's metadata.
        case debug
    }

    /// One flag: its letter and its token (the bytes after the letter, empty for most).
    public struct Flag: Hashable, Sendable {
        /// The flag's letter.
        public var letter: UInt8
        /// The token after the letter (`O123` has `123`), as offsets into the buffer.
        public var token: Range<Int>

        /// A flag.
        public init(letter: UInt8, token: Range<Int>) {
            self.letter = letter
            self.token = token
        }
    }

    /// Which command.
    public var kind: Kind
    /// The key as sent (base64 with the `b` flag); empty for `mn`.
    public var key: Range<Int>
    /// The data block of `ms`.
    public var data: Range<Int>?
    /// The flags, in the order sent.
    public var flags: [Flag]

    /// The flag with `letter`, if sent.
    public func flag(_ letter: Character) -> Flag? {
        let byte = letter.asciiValue ?? 0
        return flags.first { $0.letter == byte }
    }

    /// Whether the flag with `letter` was sent.
    public func has(_ letter: Character) -> Bool { flag(letter) != nil }

    /// The flags each command takes (memcached's `protocol.txt`); any other is `CLIENT_ERROR invalid flag`.
    static func allowed(_ kind: Kind) -> Set<UInt8> {
        let letters: String
        switch kind {
        case .get: letters = "bcCEfhklNOqRstTuvPL"
        case .set: letters = "bcCEFIkOqsSTMNPL"
        case .delete: letters = "bCEIkOqTxPL"
        case .arithmetic: letters = "bCEJNDTMOqtcvkPL"
        case .noop: letters = ""
        case .debug: letters = "b"
        }
        return Set(letters.utf8)
    }

    /// The flags whose token must be a number (signed for the times, which may be negative).
    static let numericTokens = Set("CEFNRTDJ".utf8)

    /// The longest opaque token memcached takes.
    public static let maximumOpaqueLength = 32
}

extension MemcacheTextDecoder {
    /// Decodes a meta command whose verb (`mg`...) is `kind`, its other tokens `arguments`.
    static func decodeMeta(
        _ kind: MemcacheMetaCommand.Kind,
        arguments: [Range<Int>],
        in buffer: UnsafeRawBufferPointer,
        end: Int,
        maximumValueLength: Int
    ) -> MemcacheTextDecoding {
        func failure(_ message: String) -> MemcacheTextDecoding {
            .failure(.clientError(message), end: end)
        }
        if kind == .noop { return .command(.meta(MemcacheMetaCommand(kind: .noop, key: 0..<0, flags: [])), end: end) }
        guard let key = arguments.first else { return failure("bad command line format") }
        var rest = arguments.dropFirst()
        var length: Int?
        if kind == .set {
            guard let token = rest.first,
                let value = Int(String(decoding: UnsafeRawBufferPointer(rebasing: buffer[token]), as: UTF8.self)),
                (0...(Int(Int32.max) - 2)).contains(value)
            else { return failure("bad data chunk") }
            length = value
            rest = rest.dropFirst()
        }
        var flags: [MemcacheMetaCommand.Flag] = []
        var seen = Set<UInt8>()
        let allowed = MemcacheMetaCommand.allowed(kind)
        for token in rest {
            let letter = buffer[token.lowerBound]
            guard allowed.contains(letter) else { return failure("invalid flag") }
            guard seen.insert(letter).inserted else { return failure("duplicate flag") }
            let argument = (token.lowerBound + 1)..<token.upperBound
            if MemcacheMetaCommand.numericTokens.contains(letter) {
                let text = String(decoding: UnsafeRawBufferPointer(rebasing: buffer[argument]), as: UTF8.self)
                guard Int64(text) != nil || UInt64(text) != nil else {
                    return failure("bad token in command line format")
                }
            }
            if letter == UInt8(ascii: "O"), argument.count > MemcacheMetaCommand.maximumOpaqueLength {
                return failure("opaque token too long")
            }
            if letter == UInt8(ascii: "M"), argument.count != 1 { return failure("bad token in command line format") }
            flags.append(MemcacheMetaCommand.Flag(letter: letter, token: argument))
        }
        let binary = seen.contains(UInt8(ascii: "b"))
        // A base64 key may be longer than 250 bytes as sent; its bytes are checked once decoded.
        guard binary ? (1...344).contains(key.count) : isKey(key, in: buffer) else {
            return failure("bad command line format")
        }
        var command = MemcacheMetaCommand(kind: kind, key: key, flags: flags)
        guard let length else { return .command(.meta(command), end: end) }
        guard length <= maximumValueLength else {
            return .failure(.tooLarge(replacing: nil), end: end + length + 2)
        }
        guard buffer.count >= end + length + 2 else { return .needMore }
        guard buffer[end + length] == UInt8(ascii: "\r"), buffer[end + length + 1] == UInt8(ascii: "\n") else {
            return .failure(.badDataChunk, end: end + length + 2)
        }
        command.data = end..<(end + length)
        return .command(.meta(command), end: end + length + 2)
    }
}
