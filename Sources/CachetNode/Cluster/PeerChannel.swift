import CachetCluster
import CachetIO
import CachetWire

/// One outbound connection from this node to a peer, carrying many forwarded requests at once, each with
/// its own request id and deadline; replies are matched by id, so they may come in any order. Hosted by
/// the ``CachetEventLoop`` of one of the node's loops, beside its client connections, and used only there.
///
/// `@unchecked Sendable` as every channel: touched only on its loop's queue.
/// `@exclusivity(unchecked)` on the properties touched per forward: the run-time check costs two runtime calls per access (as for `Connection`), and the single queue keeps accesses from overlapping.
final class PeerChannel: CachetChannel, @unchecked Sendable {
    /// Forwards sent with one timeout, in the order sent (so also in the order they fall due), with their
    /// deadlines. A forward answered stays here until it reaches the front (replies mostly come in order,
    /// so it is usually the front one), and one that falls due is failed only if it is still pending.
    struct DeadlineQueue {
        let timeout: Duration
        let nanoseconds: UInt64
        var entries = PendingQueue<(id: UInt32, due: UInt64)>()
    }

    let member: CachetClusterMember
    /// The loop that hosts the channel once connected, and runs its deadlines from the start (the
    /// channel may take requests while its member's name is still being resolved).
    let loop: CachetEventLoop
    private let maximumReplyLength: Int
    /// The completion of every forward in flight, by request id.
    @exclusivity(unchecked) private(set) var pending: [UInt32: (ForwardOutcome) -> Void] = [:]
    /// Deadlines, one queue per timeout in use (a forward's, and a second hop's, half of it): one timer for
    /// the channel, set to the earliest of them, instead of a timer scheduled and cancelled per forward.
    @exclusivity(unchecked) private var deadlines: [DeadlineQueue] = []
    /// The deadline timer while it is set, and when it fires.
    @exclusivity(unchecked) private var deadlineTimer: (id: CachetTimerID, due: UInt64)?
    @exclusivity(unchecked) private var nextID: UInt32 = 1
    /// How many times the requests written so far were handed to the socket: a request written while this
    /// has not moved since has not left this node yet (``PeerForwarder``'s singleflight joins only such
    /// a request, whose reply cannot predate the joiner).
    @exclusivity(unchecked) private(set) var handOffs: UInt64 = 0
    @exclusivity(unchecked) private var handOffScheduled = false
    /// Called once the channel has closed, so that its pool opens a new one for the next forward.
    var onClose: ((PeerChannel) -> Void)?

    init(member: CachetClusterMember, loop: CachetEventLoop, maximumReplyLength: Int) {
        self.member = member
        self.loop = loop
        self.maximumReplyLength = maximumReplyLength
        super.init(inputCapacity: 16 << 10, outputCapacity: 16 << 10)
    }

    /// How the member is named in messages: its id, and its address when that differs.
    var name: String { member.description }

    /// Sends `request` (a whole request frame, the `forwarded` flag already set) under a request id of
    /// this channel's; `completion` runs on the loop with the reply, or with `unavailable` when `timeout`
    /// passes first or the channel fails.
    func send(_ request: inout [UInt8], timeout: Duration, completion: @escaping (ForwardOutcome) -> Void) {
        guard state != .closed else {
            completion(.unavailable("\(name) is not connected", .refused))
            return
        }
        let id = nextID
        nextID = nextID == .max ? 1 : nextID + 1
        request.withUnsafeMutableBytes { $0.storeBytes(of: id.bigEndian, toByteOffset: 8, as: UInt32.self) }
        let nanoseconds = UInt64(max(0, timeout.nanosecondsClamped))
        let due = CachetDeadline.now() &+ nanoseconds
        if let queue = deadlines.firstIndex(where: { $0.nanoseconds == nanoseconds }) {
            deadlines[queue].entries.append((id, due))
        } else {
            var queue = DeadlineQueue(timeout: timeout, nanoseconds: nanoseconds)
            queue.entries.append((id, due))
            deadlines.append(queue)
        }
        pending[id] = completion
        armDeadlineTimer(for: due)
        write(request)
        scheduleHandOff()
    }

    /// Makes sure the deadline timer fires by `due`.
    private func armDeadlineTimer(for due: UInt64) {
        if let timer = deadlineTimer {
            guard due < timer.due else { return }
            loop.cancelTimer(timer.id)
        }
        let delay = due &- min(due, CachetDeadline.now())
        let id = loop.schedule(after: .nanoseconds(Int64(clamping: delay))) { [unowned self] in
            deadlineTimer = nil
            expireDueForwards()
        }
        deadlineTimer = (id, due)
    }

    /// Fails the forwards whose deadline has passed, and sets the timer for the next deadline.
    private func expireDueForwards() {
        let now = CachetDeadline.now()
        // A completion may send again on this channel, or close it (which empties the queues).
        var index = 0
        while index < deadlines.count {
            while index < deadlines.count, let first = deadlines[index].entries.first, first.due <= now {
                _ = deadlines[index].entries.removeFirst()
                guard let expired = pending.removeValue(forKey: first.id) else { continue }
                let timeout = deadlines[index].timeout
                expired(.unavailable("\(name) did not answer within \(timeout)", .timedOut))
            }
            index += 1
        }
        dropAnsweredDeadlines()
        let next = deadlines.compactMap { $0.entries.first?.due }.min()
        if let next { armDeadlineTimer(for: next) }
    }

    /// Drops the deadlines of answered forwards from the front of each queue.
    private func dropAnsweredDeadlines() {
        for index in deadlines.indices {
            while let first = deadlines[index].entries.first, pending[first.id] == nil {
                _ = deadlines[index].entries.removeFirst()
            }
        }
    }

    /// Hands what was written to the socket once the loop has finished the work in hand (the requests its
    /// clients sent in one batch leave together, in one write).
    private func scheduleHandOff() {
        guard !handOffScheduled else { return }
        handOffScheduled = true
        loop.execute { [self] in
            handOffScheduled = false
            handOffs &+= 1
            flush()
        }
    }

    override func channelRead() {
        while true {
            let frame: CachetFrame?
            do {
                frame = try CachetReplyDecoder.decodeValidReply(
                    in: input.wholeRegion,
                    at: input.readIndex,
                    maximumPayloadLength: maximumReplyLength
                )
            } catch {
                close(error: CachetIOError(code: .connectionFailed, message: "\(name) sent a bad reply: \(error)"))
                return
            }
            guard let frame else { break }
            let body = Array(input.wholeRegion[frame.body])
            input.moveReadIndex(to: frame.end)
            if frame.header.opcode == .auth && frame.header.id == 0 {
                // The reply to the AUTH this channel opened with (a cluster whose members have users).
                guard frame.header.status == .ok else {
                    let text = String(decoding: body, as: UTF8.self)
                    close(
                        error: CachetIOError(
                            code: .connectionFailed,
                            message: "\(name) refused this member's peer credential (\(frame.header.status)): \(text)"
                        )
                    )
                    return
                }
                continue
            }
            // A reply for a forward whose deadline passed is dropped.
            guard let completion = pending.removeValue(forKey: frame.header.id) else { continue }
            dropAnsweredDeadlines()
            completion(.answered(status: frame.header.status, body: body))
        }
        if input.readableBytes == 0 { input.clear() }
    }

    override func channelInactive(error: CachetIOError?) {
        fail(error)
    }

    /// Fails every request in flight and lets the pool forget the channel: on close, or when the member's
    /// name could not be resolved (the channel then never reached the loop). Called on the loop's queue.
    func fail(_ error: CachetIOError?) {
        let reason = error?.message ?? "the connection closed"
        let failed = pending
        pending.removeAll()
        deadlines.removeAll()
        if let timer = deadlineTimer {
            loop.cancelTimer(timer.id)
            deadlineTimer = nil
        }
        for (_, completion) in failed.sorted(by: { $0.key < $1.key }) {
            // A connect that timed out is a timeout for the member's health; anything else a failure. A
            // refused connect never sent what was written.
            let cause: ForwardOutcome.Cause =
                switch error?.code {
                case .timedOut?: .timedOut
                case .connectionRefused?: .refused
                case .connectionClosed?: .closed
                default: .connectionFailed
                }
            completion(.unavailable("\(name): \(reason)", cause))
        }
        onClose?(self)
        onClose = nil
    }
}
