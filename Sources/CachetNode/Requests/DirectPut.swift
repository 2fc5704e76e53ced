import CachetStore

/// A PUT of a large value being received straight into its memory entry, so that the value is not first
/// gathered in the connection's input buffer and then copied (memcached reads large values into the item
/// the same way). The entry stays outside the store until every byte has arrived; if the peer goes away
/// first, releasing this frees it and the older value, if any, stays.
///
/// The entry is allocated whole when the PUT starts, so a peer that announces a large value and sends it
/// slowly holds memory the store does not count yet: it is charged to the connections' memory budget
/// (``ConnectionMemory``) from start to release, and a PUT the budget has no room for is not started in
/// place (its bytes then wait in the connection's input buffer, which grows only as they arrive and only
/// while the budget allows).
///
/// A PUT refused as soon as its header and key have arrived (a value longer than `--large-value` on a node
/// without a disk tier) is received the same way into a small scratch buffer and thrown away, so that its
/// value is never gathered whole; its TOO_LARGE reply comes once its last byte has arrived, in its turn.
final class DirectPut {
    /// The entry the value goes into; nil for a refused PUT, whose bytes are thrown away.
    let pending: CachetPendingPut?
    /// Why a refused PUT was refused (its TOO_LARGE reply).
    let refusal: String?
    let id: UInt32
    /// The PUT's TTL in seconds, for its WATCH event.
    let ttl: UInt32
    /// Value bytes written so far.
    var received: Int
    /// The value's length.
    let valueLength: Int
    private let budget: ConnectionMemory
    /// Bytes charged to the budget for the value, from start to release.
    let reserved: Int
    /// Where a refused PUT's bytes are read into, over and over.
    private let scratch: UnsafeMutableRawBufferPointer?

    /// How much a refused PUT's scratch buffer holds.
    static let scratchSize = 64 * 1024

    init(pending: CachetPendingPut, id: UInt32, ttl: UInt32, received: Int, budget: ConnectionMemory) {
        self.pending = pending
        refusal = nil
        scratch = nil
        self.ttl = ttl
        self.id = id
        self.received = received
        valueLength = pending.valueLength
        self.budget = budget
        self.reserved = pending.valueLength
        budget.charge(reserved, for: .requests)
    }

    /// A refused PUT of `valueLength` bytes, `received` of them already taken from the input.
    init(refusing valueLength: Int, because refusal: String, id: UInt32, received: Int, budget: ConnectionMemory) {
        pending = nil
        self.refusal = refusal
        scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.scratchSize, alignment: 16)
        ttl = 0
        self.id = id
        self.received = received
        self.valueLength = valueLength
        self.budget = budget
        reserved = Self.scratchSize
        budget.charge(reserved, for: .requests)
    }

    deinit {
        scratch?.deallocate()
        budget.charge(-reserved, for: .requests)
    }

    /// Where the next bytes go.
    var remaining: UnsafeMutableRawBufferPointer {
        if let pending { return UnsafeMutableRawBufferPointer(rebasing: pending.value[received...]) }
        let scratch = scratch.unsafelyUnwrapped
        return UnsafeMutableRawBufferPointer(rebasing: scratch[0..<min(scratch.count, valueLength - received)])
    }

    var isComplete: Bool { received == valueLength }
}
