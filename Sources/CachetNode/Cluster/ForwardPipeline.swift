import CachetCluster
import CachetIO

/// The replies of one client connection while forwards of its requests are in flight
/// (`Protocol/CLUSTER.md`, "Pipelining across a forward").
///
/// A connection keeps decoding and answering (or forwarding) the requests behind a forward; every reply
/// still leaves in request order. A connection has one while some forward of it is in flight; the loop
/// drops it, and the connection goes back to writing its replies straight to its output, once every
/// forward has answered and every reply held has been released.
///
/// The order is a ``CachetReplyOrder`` of byte runs: each forward reserves a slot when it starts, and the
/// replies written since the previous slot (to ``pending``) are turned into a filled slot first, so that
/// what was answered here keeps its place. A forward's reply fills its slot; whatever is then at the front
/// goes to the connection's output.
///
/// Bounded (``maximumInFlight`` forwards, ``heldLimit`` bytes held), and what it holds is charged to the
/// connections' memory budget (``charged``); beyond either bound the connection stops reading until
/// forwards answer.
///
/// Touched only on its connection's loop queue.
/// `@exclusivity(unchecked)` on the properties touched per forward: the run-time check costs two runtime calls per access (as for `Connection`), and the single queue keeps accesses from overlapping.
final class ForwardPipeline {
    /// Forwards one connection may have in flight before it stops reading.
    static let maximumInFlight = 128
    /// Reply bytes one connection may hold back (behind forwards not yet answered) before it stops reading.
    static let heldLimit = 1 << 20

    /// Replies, in request order, with a slot per forward.
    @exclusivity(unchecked) private var order = CachetReplyOrder<[UInt8]>()
    /// Replies to requests after the last forward's slot, written by the request processor.
    @exclusivity(unchecked) var pending = CachetByteBuffer(capacity: Connection.initialBufferSize)
    /// Forwards started and not answered.
    @exclusivity(unchecked) private(set) var inFlight = 0
    /// Bytes in filled slots not yet released.
    @exclusivity(unchecked) private(set) var filledBytes = 0
    /// Bytes charged to the connections' memory budget for this pipeline.
    @exclusivity(unchecked) var charged = 0
    /// Set while the loop is processing the connection's input, so that a forward answered at once (its
    /// owner marked down) only fills its slot and leaves the rest to that processing.
    @exclusivity(unchecked) var processing = false

    /// Reply bytes held back now.
    var heldBytes: Int { filledBytes + pending.readableBytes }

    /// What the pipeline holds of the budget: the pending buffer and the replies held in slots.
    var footprint: Int { pending.capacity + filledBytes }

    /// Whether nothing is in flight: every reply can go to the output.
    var isEmpty: Bool { order.pendingCount == 0 }

    /// Reserves the slot of a forward just started, after turning the replies written since the last slot
    /// into a slot of their own.
    /// - Parameter output: receives the replies that are at the front of the order.
    /// - Returns: the forward's slot.
    func reserveForward(releasingTo output: inout CachetByteBuffer) -> CachetReplyOrder<[UInt8]>.Slot {
        if pending.readableBytes > 0 {
            let bytes = Array(pending.readableRegion)
            pending.clear()
            let slot = order.reserve()
            filledBytes += bytes.count
            release(order.fill(slot, with: bytes), to: &output)
        }
        inFlight += 1
        return order.reserve()
    }

    /// Fills a forward's slot with its reply and moves every reply now at the front to `output`; once
    /// nothing is in flight, the pending replies too.
    /// - Parameters:
    ///   - slot: the forward's slot.
    ///   - reply: the whole reply frame.
    ///   - output: the connection's output.
    func fill(_ slot: CachetReplyOrder<[UInt8]>.Slot, with reply: [UInt8], releasingTo output: inout CachetByteBuffer) {
        inFlight -= 1
        filledBytes += reply.count
        release(order.fill(slot, with: reply), to: &output)
        if order.pendingCount == 0 && pending.readableBytes > 0 {
            output.append(pending.readableRegion)
            pending.clear()
        }
    }

    private func release(_ replies: [[UInt8]], to output: inout CachetByteBuffer) {
        for reply in replies {
            filledBytes -= reply.count
            output.append(reply)
        }
    }
}
