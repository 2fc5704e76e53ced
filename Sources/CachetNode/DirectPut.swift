import CachetStore

/// A PUT of a large value being received straight into its memory entry, so that the value is not first
/// gathered in the connection's input buffer and then copied (memcached reads large values into the item
/// the same way). The entry stays outside the store until every byte has arrived; if the peer goes away
/// first, releasing this frees it and the older value, if any, stays.
final class DirectPut {
    let pending: CachetPendingPut
    let id: UInt32
    /// Value bytes written so far.
    var received: Int
    private let budget: DirectPutBudget
    private let reserved: Int

    init(pending: CachetPendingPut, id: UInt32, received: Int, budget: DirectPutBudget) {
        self.pending = pending
        self.id = id
        self.received = received
        self.budget = budget
        self.reserved = pending.valueLength
        budget.reserved += reserved
    }

    deinit { budget.reserved -= reserved }

    /// Where the next bytes go.
    var remaining: UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: pending.value[received...])
    }

    var isComplete: Bool { received == pending.valueLength }
}

/// Value bytes allocated for large PUTs still arriving on one event loop. An entry is allocated whole when
/// its PUT starts, so a peer that announces large values and sends them slowly holds memory the store does
/// not count yet; past a quarter of the memory limit, further large PUTs wait in the connection's input
/// buffer as smaller ones do, which grows only as bytes arrive. Touched only on the loop's queue.
final class DirectPutBudget {
    var reserved = 0
}
