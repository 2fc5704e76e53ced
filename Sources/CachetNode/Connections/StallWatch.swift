/// When a connection that holds part of the connection-memory budget counts as stalled while others wait
/// for memory (`--client-stall-timeout`; README, "Limits"): the I/O queue's clock of how long memory has
/// been short, how often it looks, and the rule. Pure: times are `DispatchTime` nanoseconds the caller
/// passes; the queue keeps each connection's progress marks and closes the stalled ones.
struct StallWatch {
    /// Nanoseconds a connection may hold budget without progress while others wait; 0 never closes one.
    let timeout: UInt64
    /// Since when connections have waited for memory without a break; 0 while none waits.
    private(set) var exhaustedSince: UInt64 = 0
    /// When connections were last looked at.
    private var lastScan: UInt64 = 0
    /// How often, at most, connections are looked at while others wait for memory.
    static let scanInterval: UInt64 = 100_000_000

    /// - Parameter timeout: nanoseconds; 0 turns the watch off.
    init(timeout: UInt64) {
        self.timeout = timeout
    }

    /// Whether the watch runs now: it is on and connections are waiting for memory. When they are not, the
    /// clock of how long memory has been short starts over.
    mutating func isWatching(connectionsWaiting: Bool) -> Bool {
        let watching = timeout > 0 && connectionsWaiting
        if !watching { exhaustedSince = 0 }
        return watching
    }

    /// Whether to look at the connections at `now` (at most every ``scanInterval``); starts the clock of
    /// how long memory has been short on its first call.
    mutating func shouldScan(now: UInt64) -> Bool {
        if exhaustedSince == 0 { exhaustedSince = now }
        guard now >= lastScan + Self.scanInterval else { return false }
        lastScan = now
        return true
    }

    /// Whether a connection is stalled at `now`: one with replies pending whose client has taken none
    /// since `repliesStalledSince`, or one with part of a request in whose client has neither read replies
    /// nor finished a request since `requestsStalledSince` (bytes dripped in are not progress); each for
    /// ``timeout``, counted from when memory became short at the earliest.
    func isStalled(
        pendingReplies: Bool,
        pendingRequest: Bool,
        repliesStalledSince: UInt64,
        requestsStalledSince: UInt64,
        now: UInt64
    ) -> Bool {
        let repliesStalled = now - max(repliesStalledSince, exhaustedSince) >= timeout
        // A client reading its replies moves, even while its last request is half-sent (large PUTs
        // pipelined: reads end mid-frame).
        let requestStalled = repliesStalled && now - max(requestsStalledSince, exhaustedSince) >= timeout
        return (pendingReplies && repliesStalled) || (pendingRequest && requestStalled)
    }
}
