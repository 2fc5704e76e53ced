import CachetWire

/// The life of one node's watch (``NodeWatch``), without I/O: it is told what happened to the connection
/// and says what to do next. It keeps where the stream stands, so that a new connection resumes after the
/// last change delivered, and the backoff between connections: 100 ms, doubled after each connection that
/// ends, up to 2 s, and back to 100 ms once a WATCH is accepted.
struct WatchStateMachine: Sendable {
    /// Where the watch is.
    enum State: Hashable, Sendable {
        /// Not started.
        case idle
        /// A connection is opening, its AUTH (if any) and WATCH sent: waiting for the WATCH's reply.
        case connecting
        /// The node accepted the WATCH: its events flow, numbered in its run `run`.
        case watching(run: UInt64)
        /// The last connection ended: the next one opens when the backoff has passed.
        case waiting
        /// The stream ended: nothing opens again.
        case stopped
    }

    /// What the watch does next.
    enum Action: Hashable, Sendable {
        /// Nothing.
        case none
        /// Open a connection and send WATCH, resuming after this position (nil: from now).
        case connect(resumingAfter: CachetWatchPosition?)
        /// Wait this long, then call ``retryDue()``.
        case retry(after: Duration)
    }

    /// The first wait after a connection ends, and the wait after a connection whose WATCH was accepted.
    static let initialBackoff = Duration.milliseconds(100)
    /// The longest wait between connections.
    static let maximumBackoff = Duration.seconds(2)

    /// Where the watch is.
    private(set) var state = State.idle
    /// The last position delivered (or the start of the stream the node last accepted); nil before any.
    private(set) var position: CachetWatchPosition?
    /// The wait after the next connection ends.
    private(set) var backoff = initialBackoff

    /// Starts the watch: the first connection opens.
    mutating func start() -> Action {
        guard state == .idle else { return .none }
        state = .connecting
        return .connect(resumingAfter: position)
    }

    /// The node accepted the WATCH; its reply says where the stream starts. A watch that connects again
    /// after this one ends waits the initial backoff.
    /// - Parameter start: the position the node's stream starts after.
    mutating func accepted(at start: CachetWatchPosition) {
        guard state == .connecting else { return }
        state = .watching(run: start.run)
        position = start
        backoff = Self.initialBackoff
    }

    /// An EVENT arrived.
    /// - Parameter sequence: its sequence number.
    /// - Returns: its position in the node's stream, now the watch's; nil when no WATCH is accepted (the
    ///   frame is not delivered).
    mutating func received(sequence: UInt64) -> CachetWatchPosition? {
        guard case .watching(let run) = state else { return nil }
        let received = CachetWatchPosition(run: run, sequence: sequence)
        position = received
        return received
    }

    /// The connection ended: it could not open, the node refused the AUTH or the WATCH, its reply did not
    /// come in time, or the node closed it.
    mutating func connectionEnded() -> Action {
        switch state {
        case .connecting, .watching:
            state = .waiting
            let wait = backoff
            backoff = min(backoff * 2, Self.maximumBackoff)
            return .retry(after: wait)
        case .idle, .waiting, .stopped:
            return .none
        }
    }

    /// The backoff has passed: the next connection opens.
    mutating func retryDue() -> Action {
        guard state == .waiting else { return .none }
        state = .connecting
        return .connect(resumingAfter: position)
    }

    /// Ends the watch for good.
    /// - Returns: whether it was still going (false when stopped already).
    mutating func stop() -> Bool {
        defer { state = .stopped }
        return state != .stopped
    }
}
