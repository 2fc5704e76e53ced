import CachetWire

#if canImport(Glibc)
import Glibc
#endif

/// What one fuzz input asks of a connection: requests over eight keys, the pieces their bytes are written
/// in, and the pauses between pieces.
///
/// The input is read as:
///
/// - byte 0: the number of operations, `byte % 48 + 1`;
/// - then one byte per operation, two for a PUT: the top three bits choose the kind (0, 1: PUT; 2, 3, 7:
///   GET; 4: DEL; 5: PING; 6: WAIT), the low three bits the key (`a b c d w x y z`); a PUT's second byte
///   chooses its value size from ``valueSizes`` (modulo its count);
/// - every byte after the operations is a piece: its low four bits choose a size from ``pieceSizes``, its
///   top four bits a pause before the next piece from ``pauses`` (mostly none). Once the pieces run out,
///   the rest of each segment goes in one write.
///
/// WAIT sends nothing: the bytes after it are written only once every request before it is answered, as a
/// client that waits for its replies would (a piece never spans a WAIT). A value is never taken from the
/// input: it is ``patternValue(count:key:seed:)`` of its size, its key and its operation's position, so a
/// value that comes back shifted, cut short, stale or another key's does not compare equal, and inputs stay
/// a few dozen bytes even when they move megabytes.
///
/// Operations that would take the traffic of the input (PUT values sent, GET values received) past
/// ``trafficLimit`` are left out, so that one input stays well under a second.
struct ConnectionProgram: CustomStringConvertible {
    /// One request.
    enum Operation {
        case put(key: Int, size: Int)
        case get(key: Int)
        case delete(key: Int)
        case ping
        /// Write nothing more until every earlier request is answered.
        case wait
    }

    /// A piece of the byte stream: how many bytes to write, then how long to pause.
    struct Piece {
        var size: Int
        var pauseMicroseconds: Int
    }

    /// The keys, by number.
    static let keys: [[UInt8]] = ["a", "b", "c", "d", "w", "x", "y", "z"].map { Array($0.utf8) }

    /// Value sizes on both sides of the sizes the node treats differently: the 1 KiB budget check of GET
    /// replies, the 4 KiB initial buffers, the 8 KiB direct send, the 32 KiB fair allowance, the 64 KiB
    /// in-place PUT and retained input, the 256 KiB retained output, and 1 MiB, four of whose GET replies
    /// pass the 4 MiB limit of pending replies (twice, for weight).
    static let valueSizes = [
        0, 1, 24, 480, 1_000, 1_023, 1_024, 1_025, 1_100, 4_000, 4_095, 4_096, 4_097, 4_800, 8_100, 8_191,
        8_192, 8_193, 32_700, 32_768, 32_800, 64_000, 65_535, 65_536, 65_600, 140_000, 262_000, 262_144,
        262_200, 296_000, 1_048_576, 1_048_576,
    ]

    /// Piece sizes, from one byte (every header split) to 4 MiB; the last is "the rest of the segment".
    static let pieceSizes = [
        1, 3, 8, 12, 13, 100, 1_000, 4_095, 4_096, 8_192, 65_535, 65_536, 262_144, 1 << 20, 4 << 20, Int.max,
    ]

    /// Pauses after a piece, in microseconds: none for ten values out of sixteen, then 50 µs to 10 ms.
    static let pauses = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 50, 200, 1_000, 2_000, 5_000, 10_000]

    /// Bytes of values one input may send and receive.
    static let trafficLimit = 24 << 20

    /// The most operations an input holds.
    static let maximumOperations = 48

    var operations: [Operation] = []
    var pieces: [Piece] = []

    /// Reads a program from fuzz input (see the type's description); any bytes make a program.
    init(decoding input: UnsafeRawBufferPointer) {
        guard let first = input.first else { return }
        let count = Int(first) % Self.maximumOperations + 1
        var offset = 1
        // The sizes stored per key, to bound the GET replies' traffic as the node will send them.
        var stored = [Int?](repeating: nil, count: Self.keys.count)
        var traffic = 0
        while operations.count < count && offset < input.count {
            let byte = input[offset]
            offset += 1
            let key = Int(byte & 7)
            let operation: Operation
            switch byte >> 5 {
            case 0, 1:
                guard offset < input.count else { return }
                let size = Self.valueSizes[Int(input[offset]) % Self.valueSizes.count]
                offset += 1
                guard traffic + size <= Self.trafficLimit else { continue }
                traffic += size
                stored[key] = size
                operation = .put(key: key, size: size)
            case 4:
                stored[key] = nil
                operation = .delete(key: key)
            case 5:
                operation = .ping
            case 6:
                operation = .wait
            default:
                let size = stored[key] ?? 0
                guard traffic + size <= Self.trafficLimit else { continue }
                traffic += size
                operation = .get(key: key)
            }
            operations.append(operation)
        }
        while offset < input.count {
            let byte = Int(input[offset])
            offset += 1
            pieces.append(Piece(size: Self.pieceSizes[byte & 15], pauseMicroseconds: Self.pauses[byte >> 4]))
        }
    }

    /// The value a PUT sends: `count` bytes, byte `i` being `i × (2 × key + 1) + seed` (truncated to 8
    /// bits), built with a few `memcpy`s as `PatternBytes` in the test support does.
    static func patternValue(count: Int, key: Int, seed: Int) -> [UInt8] {
        let step = 2 * key + 1
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            guard let base = buffer.baseAddress else {
                initialized = 0
                return
            }
            let period = min(count, 256)
            for index in 0..<period { base[index] = UInt8(truncatingIfNeeded: index &* step &+ seed) }
            var filled = period
            while filled < count {
                let chunk = min(filled, count - filled)
                memcpy(base + filled, base, chunk)
                filled += chunk
            }
            initialized = count
        }
    }

    /// The program in one line, for a failure's message: `PUT a (1048576 B), GET a, WAIT, …; pieces: …`.
    var description: String {
        let operationText = operations.map { operation -> String in
            switch operation {
            case .put(let key, let size): return "PUT \(Self.keyName(key)) (\(size) B)"
            case .get(let key): return "GET \(Self.keyName(key))"
            case .delete(let key): return "DEL \(Self.keyName(key))"
            case .ping: return "PING"
            case .wait: return "WAIT"
            }
        }
        let pieceText =
            pieces.isEmpty
            ? "none (each segment in one write)"
            : pieces.map { piece in
                (piece.size == Int.max ? "rest" : "\(piece.size)")
                    + (piece.pauseMicroseconds > 0 ? " +\(piece.pauseMicroseconds) µs" : "")
            }.joined(separator: ", ")
        return "[\(operationText.joined(separator: ", "))]; pieces: \(pieceText)"
    }

    static func keyName(_ key: Int) -> String { String(decoding: keys[key], as: UTF8.self) }
}
