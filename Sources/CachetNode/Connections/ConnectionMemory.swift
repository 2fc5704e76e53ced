import CachetLocking
import Synchronization

/// The one budget for the memory the node holds on behalf of its connections: every connection's input
/// and output buffers, and the values of large PUTs still arriving in place (``DirectPut``). Shared by all
/// I/O loops (`--connection-memory`, reported by STATS as `connection_memory_bytes`,
/// `connection_memory_limit` and `connections_paused`).
///
/// Charges are made after the fact for buffers (a loop reports each connection's new footprint when it
/// settles it: what its two buffers hold beyond their initial 4 KiB each, which every connection has and
/// which `--max-connections` bounds) and up front for large PUTs. The budget decides nothing by itself: a loop asks
/// ``allows(_:)`` before it lets a connection's buffers grow or a large PUT start, and a connection that
/// is refused waits (it is not read, and its next request is not answered) until memory is returned;
/// ``releases`` tells the loops when that has happened. A connection may always use the buffers it
/// already has, so requests and replies that fit them (small ones always do) keep being served.
///
/// Queued replies may take the budget only up to ``replyLimit``: the rest, room for one frame of the
/// largest size, is left to requests, so that clients which never read their replies cannot take all
/// of it and stall every large request for good. So every charge says what it holds (``Use``): requests
/// are checked against the budget with replies counted at most up to ``replyLimit``, and what connections
/// hold within their fair allowances (below) is counted but never checked; replies queued under the fair
/// allowance beyond ``replyLimit``, or inputs of ordinary size, cannot take that room either.
///
/// Fairness: a connection may always grow its input to ``fairAllowance`` bytes, and queue a reply of up to
/// that size when nothing of its earlier replies is pending (it reads them), whatever the budget says. So
/// clients that hold the budget (large frames dripped, replies never read) cannot starve the requests and
/// replies of ordinary size of the others; the price is a bounded overshoot, at most ``fairAllowance`` of
/// input and of output per connection (`--max-connections` × 64 KiB in all), documented in the README.
/// Larger requests and replies still wait for the budget.
final class ConnectionMemory: Sendable {
    /// What a connection may always hold in its input, and in its output while its earlier replies have
    /// been sent, beyond the budget: requests and replies of ordinary size are never held back.
    static let fairAllowance = 32 * 1024

    /// The budget in bytes.
    let limit: Int
    /// The part of the budget that queued replies may take.
    let replyLimit: Int
    private let used = Atomic<Int>(0)
    /// Bytes held for requests beyond the connections' fair allowances.
    private let requestBytes = Atomic<Int>(0)
    /// Bytes held for replies.
    private let replyBytes = Atomic<Int>(0)
    private let releaseCount = Atomic<Int>(0)
    private let pausedCount = Atomic<Int>(0)
    private let evictedCount = Atomic<Int>(0)
    /// Called when the first connection starts waiting, so that every loop watches its own connections
    /// for stalled holders of the budget (the waiting one may be on another loop than they are).
    private let waitingStarted = CachetLock<[@Sendable () -> Void]>([])

    /// - Parameters:
    ///   - limit: the budget.
    ///   - largestFrame: the largest frame a request may be (`--max-frame` and its prefix); room for it,
    ///     up to half the budget, is kept from replies.
    init(limit: Int, largestFrame: Int = 0) {
        self.limit = limit
        self.replyLimit = limit - min(largestFrame, limit / 2)
    }

    /// What a charge holds.
    enum Use {
        /// Requests: input buffers beyond a connection's fair allowance, large PUTs arriving in place or
        /// waiting for the disk queue, uploads being staged.
        case requests
        /// A connection's input within its fair allowance: counted, never checked (see the type's comment).
        case fairInput
        /// Replies: output buffers, a session's own buffers, replies held behind forwards, disk reads.
        case replies
    }

    /// Bytes a reply may still take: what requests and replies leave of ``replyLimit``.
    var replyRoom: Int {
        max(0, replyLimit - requestBytes.load(ordering: .relaxed) - replyBytes.load(ordering: .relaxed))
    }

    /// Bytes charged now.
    var current: Int { used.load(ordering: .relaxed) }

    /// Connections waiting for memory now.
    var paused: Int { pausedCount.load(ordering: .relaxed) }

    /// Grows each time memory is returned; a loop with waiting connections retries them when it changes.
    var releases: Int { releaseCount.load(ordering: .relaxed) }

    /// Whether a request may take `bytes` more: what requests hold beyond the fair allowances, and replies
    /// up to ``replyLimit``, leave room for them. A connection's input within its fair allowance is never
    /// checked.
    func allowsRequest(_ bytes: Int) -> Bool {
        let replies = min(replyBytes.load(ordering: .relaxed), replyLimit)
        return bytes <= 0 || requestBytes.load(ordering: .relaxed) + replies + bytes <= limit
    }

    /// Adds `delta` bytes held for `use` (negative to return them).
    func charge(_ delta: Int, for use: Use) {
        guard delta != 0 else { return }
        used.add(delta, ordering: .relaxed)
        switch use {
        case .requests: requestBytes.add(delta, ordering: .relaxed)
        case .replies: replyBytes.add(delta, ordering: .relaxed)
        case .fairInput: break
        }
        if delta < 0 { releaseCount.add(1, ordering: .relaxed) }
    }

    /// What a connection's buffers hold beyond their initial sizes, as it is charged: its input (the frame
    /// it reserved for included) split at the fair allowance, and its output with its session's buffers.
    struct BufferCharge: Equatable {
        var requests = 0
        var fairInput = 0
        var replies = 0

        /// Every byte, whatever it holds.
        var total: Int { requests + fairInput + replies }

        /// The charge for `input` bytes of input and `replies` bytes of output beyond the initial buffers.
        init(input: Int, replies: Int) {
            let fair = ConnectionMemory.fairAllowance - Connection.initialBufferSize
            fairInput = min(max(0, input), fair)
            requests = max(0, input - fair)
            self.replies = replies
        }

        init() {}
    }

    /// Changes the charge of a connection's buffers from `old` to `new`.
    func recharge(from old: BufferCharge, to new: BufferCharge) {
        charge(new.requests - old.requests, for: .requests)
        charge(new.fairInput - old.fairInput, for: .fairInput)
        charge(new.replies - old.replies, for: .replies)
    }

    /// Connections closed since start for holding budget without progress while others waited.
    var evicted: Int { evictedCount.load(ordering: .relaxed) }

    /// Counts a connection that starts or stops waiting for memory; the first one to start waiting
    /// calls every handler given to ``onWaitingStarted(_:)``.
    func countPaused(_ delta: Int) {
        let (before, _) = pausedCount.add(delta, ordering: .relaxed)
        if before == 0 && delta > 0 {
            for handler in waitingStarted.withLock({ $0 }) { handler() }
        }
    }

    /// Registers `handler`, called (on the thread of the connection that starts waiting) whenever the
    /// number of connections waiting for memory goes up from 0.
    func onWaitingStarted(_ handler: @escaping @Sendable () -> Void) {
        waitingStarted.withLock { $0.append(handler) }
    }

    /// Counts a connection closed for holding budget without progress.
    func countEvicted() { evictedCount.add(1, ordering: .relaxed) }
}
