/// A key in the singleflight's table, hashed as one run of bytes (an array of bytes hashes element by element:
/// some 1,400 instructions a forward in callgrind's count).
struct FlightKey: Hashable, Sendable {
    let bytes: [UInt8]

    func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}
