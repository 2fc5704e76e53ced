/// The life of one pooled connection slot and the requests in flight on it. Does no I/O: the
/// connection feeds it events (a request issued, the socket connected, a reply header read, a timer
/// tick, the socket closed) and performs the actions it returns.
///
/// Replies come back in the order the requests were sent (`Protocol/PROTOCOL.md`, "Pipelining and
/// ordering"), so the requests wait in a ring in send order and each reply must match the head's id; a
/// request that was cancelled or timed out keeps its place, without a waiter, until its reply arrives.
/// A reply whose id is not the head's means the stream cannot be trusted: every waiter fails and the
/// connection closes.
///
/// `Waiter` is whatever is resumed with the outcome: a continuation in the client, a plain value in tests.
struct ConnectionStateMachine<Waiter> {
    enum State: Equatable {
        /// No socket: the next request opens one.
        case idle
        /// A socket is being connected; requests queue until it is.
        case connecting
        /// Requests are written as they are issued.
        case ready
        /// The client is shutting down: no new requests, the ones in flight are served.
        case draining
        /// Shut down: nothing more.
        case shutdown
    }

    /// What the connection must do after a request was issued.
    enum IssueAction: Equatable {
        /// Open the socket (the request is queued and is written once connected).
        case connect
        /// Write the request now.
        case write
        /// Nothing: the request is queued behind a connect in progress.
        case wait
        /// The slot is shut down: the waiter was not kept; fail it with `shutdown`.
        case rejectShutdown
    }

    /// What the connection must do with a reply.
    enum ReplyAction {
        /// Resume this waiter with the reply.
        case deliver(Waiter)
        /// The request was abandoned (cancelled or timed out): drop the reply.
        case discard
        /// The reply matches no request in flight: close the socket and fail these waiters.
        case protocolViolation([Waiter])
    }

    private(set) var state: State = .idle
    private var ring = RequestRing<Waiter>()

    init() {}

    /// Requests in flight or queued, abandoned ones included.
    var inFlight: Int { ring.count }

    /// Requests in flight or queued whose caller still waits.
    var waiting: Int { ring.waitingCount }

    /// Issues a request: gives it a place in the ring.
    /// - Parameters:
    ///   - id: the request's id, chosen by the caller before (so that a cancellation can name it).
    ///   - waiter: resumed with the outcome.
    ///   - deadline: the monotonic time in nanoseconds after which the request times out.
    /// - Returns: what to do.
    mutating func issue(id: UInt32, waiter: Waiter, deadline: UInt64) -> IssueAction {
        switch state {
        case .draining, .shutdown:
            return .rejectShutdown
        case .idle, .connecting, .ready:
            break
        }
        ring.append(PendingRequest(id: id, deadline: deadline, waiter: waiter))
        switch state {
        case .idle:
            state = .connecting
            return .connect
        case .connecting:
            return .wait
        default:
            return .write
        }
    }

    /// The socket connected: queued requests can be written.
    /// - Returns: whether anything is queued.
    mutating func connected() -> Bool {
        if state == .connecting { state = .ready }
        return !ring.isEmpty
    }

    /// The connect failed or the socket closed: every request in flight fails.
    /// - Returns: the waiters to fail.
    mutating func closed() -> [Waiter] {
        let waiters = ring.removeAll()
        switch state {
        case .idle, .connecting, .ready: state = .idle
        case .draining, .shutdown: state = .shutdown
        }
        return waiters
    }

    /// A reply's header was read.
    /// - Parameter id: the reply's id.
    /// - Returns: what to do with it.
    mutating func replyReceived(id: UInt32) -> ReplyAction {
        guard let head = ring.first, head.id == id else {
            let waiters = ring.removeAll()
            state = (state == .draining || state == .shutdown) ? .shutdown : .idle
            return .protocolViolation(waiters)
        }
        ring.removeFirst()
        if state == .draining && ring.isEmpty { state = .shutdown }
        if let waiter = head.waiter { return .deliver(waiter) }
        return .discard
    }

    /// The caller of request `id` gave up (its task was cancelled): its waiter is handed back, and its
    /// place kept until the reply arrives.
    /// - Parameter id: the request's id.
    /// - Returns: the waiter to fail, or nil when the request was already answered.
    mutating func abandon(id: UInt32) -> Waiter? {
        ring.abandon(id: id)
    }

    /// Times out every request whose deadline is at or before `now`.
    /// - Parameter now: the monotonic time in nanoseconds.
    /// - Returns: the waiters to fail with `timeout`.
    mutating func expire(now: UInt64) -> [Waiter] {
        ring.abandonExpired(now: now)
    }

    /// The earliest deadline of a request still waited for.
    var earliestDeadline: UInt64? { ring.earliestDeadline }

    /// The client is shutting down: no new requests; requests in flight are still answered.
    /// - Returns: whether the slot has nothing in flight (and so is shut down already).
    mutating func drain() -> Bool {
        switch state {
        case .idle:
            state = .shutdown
        case .connecting, .ready:
            state = ring.isEmpty ? .shutdown : .draining
        case .draining, .shutdown:
            break
        }
        return state == .shutdown
    }
}

/// One request in flight: its id, when it times out, and who waits for it (nil once abandoned).
struct PendingRequest<Waiter> {
    var id: UInt32
    var deadline: UInt64
    var waiter: Waiter?
}

/// A first-in first-out ring of requests that reuses its storage: no allocation once it has grown to
/// the connection's largest number of requests in flight.
struct RequestRing<Waiter> {
    private var storage: ContiguousArray<PendingRequest<Waiter>?> = []
    private var head = 0
    private(set) var count = 0
    private(set) var waitingCount = 0

    var isEmpty: Bool { count == 0 }

    var first: PendingRequest<Waiter>? { count == 0 ? nil : storage[head] }

    mutating func append(_ request: PendingRequest<Waiter>) {
        if count == storage.count { grow() }
        storage[(head + count) & (storage.count - 1)] = request
        count += 1
        if request.waiter != nil { waitingCount += 1 }
    }

    @discardableResult
    mutating func removeFirst() -> PendingRequest<Waiter>? {
        guard count > 0 else { return nil }
        let request = storage[head]
        storage[head] = nil
        head = (head + 1) & (storage.count - 1)
        count -= 1
        if request?.waiter != nil { waitingCount -= 1 }
        return request
    }

    /// Empties the ring, returning the waiters still waiting, oldest first.
    mutating func removeAll() -> [Waiter] {
        var waiters: [Waiter] = []
        if waitingCount > 0 { waiters.reserveCapacity(waitingCount) }
        while let request = removeFirst() {
            if let waiter = request.waiter { waiters.append(waiter) }
        }
        head = 0
        return waiters
    }

    mutating func abandon(id: UInt32) -> Waiter? {
        for offset in 0..<count {
            let index = (head + offset) & (storage.count - 1)
            if storage[index]?.id == id, let waiter = storage[index]?.waiter {
                storage[index]?.waiter = nil
                waitingCount -= 1
                return waiter
            }
        }
        return nil
    }

    mutating func abandonExpired(now: UInt64) -> [Waiter] {
        guard waitingCount > 0 else { return [] }
        var expired: [Waiter] = []
        for offset in 0..<count {
            let index = (head + offset) & (storage.count - 1)
            if let request = storage[index], let waiter = request.waiter, request.deadline <= now {
                storage[index]?.waiter = nil
                waitingCount -= 1
                expired.append(waiter)
            }
        }
        return expired
    }

    var earliestDeadline: UInt64? {
        var earliest: UInt64?
        for offset in 0..<count {
            if let request = storage[(head + offset) & (storage.count - 1)], request.waiter != nil {
                earliest = min(earliest ?? .max, request.deadline)
            }
        }
        return earliest
    }

    private mutating func grow() {
        let capacity = max(16, storage.count * 2)
        var grown = ContiguousArray<PendingRequest<Waiter>?>(repeating: nil, count: capacity)
        for offset in 0..<count {
            grown[offset] = storage[(head + offset) & (storage.count - 1)]
        }
        storage = grown
        head = 0
    }
}
