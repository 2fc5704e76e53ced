/// Replies on one client connection leave in request order even when forwards complete out of order.
/// Pure: a queue of slots, reserved in request order, filled in any order, released from the front.
public struct CachetReplyOrder<Reply: Sendable>: Sendable {
    /// A reserved place in the order.
    public struct Slot: Sendable, Hashable {
        /// The slot's sequence number on its connection.
        public let sequence: UInt64

        @usableFromInline
        init(sequence: UInt64) { self.sequence = sequence }
    }

    // Inlinable, so that the node's use of it is specialized for its reply type: unspecialized, every call
    // asked the runtime for the metadata of its arrays and optionals (BENCHMARKS.md, "Forwarded requests").
    @usableFromInline var slots: [Reply?] = []
    @usableFromInline var head = 0
    @usableFromInline var firstSequence: UInt64 = 0

    /// Creates an empty order.
    @inlinable
    public init() {}

    /// Slots reserved and not yet released.
    @inlinable
    public var pendingCount: Int { slots.count - head }

    /// Reserves the next slot, for a request just decoded.
    /// - Returns: the slot.
    /// - Complexity: amortized O(1).
    @inlinable
    public mutating func reserve() -> Slot {
        slots.append(nil)
        return Slot(sequence: firstSequence + UInt64(slots.count - head - 1))
    }

    /// Fills a slot with its reply and releases every reply now at the front, in order.
    /// - Parameters:
    ///   - slot: a slot reserved and not filled.
    ///   - reply: its reply.
    /// - Returns: the replies to write now, in request order (empty while an earlier slot is unfilled).
    /// - Complexity: O(r) in the replies released, amortized.
    @inlinable
    public mutating func fill(_ slot: Slot, with reply: Reply) -> [Reply] {
        guard slot.sequence >= firstSequence else { return [] }
        let index = head + Int(slot.sequence - firstSequence)
        guard index < slots.count, slots[index] == nil else { return [] }
        slots[index] = reply
        var released: [Reply] = []
        while head < slots.count, let ready = slots[head] {
            released.append(ready)
            slots[head] = nil
            head += 1
            firstSequence += 1
        }
        if head == slots.count || head > 64 && head * 2 > slots.count {
            slots.removeFirst(head)
            head = 0
        }
        return released
    }
}
