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
final class DirectPut {
    let pending: CachetPendingPut
    let id: UInt32
    /// The PUT's TTL in seconds, for its WATCH event.
    let ttl: UInt32
    /// Value bytes written so far.
    var received: Int
    private let budget: ConnectionMemory
    /// Bytes charged to the budget for the value, from start to release.
    let reserved: Int

    init(pending: CachetPendingPut, id: UInt32, ttl: UInt32, received: Int, budget: ConnectionMemory) {
        self.pending = pending
        self.ttl = ttl
        self.id = id
        self.received = received
        self.budget = budget
        self.reserved = pending.valueLength
        budget.charge(reserved)
    }

    deinit { budget.charge(-reserved) }

    /// Where the next bytes go.
    var remaining: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: pending.value[received...])
    }

    var isComplete: Bool { received == pending.valueLength }
}
