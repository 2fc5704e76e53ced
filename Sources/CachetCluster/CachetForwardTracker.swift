/// Forwards in flight to each peer: a cap per peer, so one slow peer cannot take every slot, and a
/// deadline per forward, so a peer that does not answer costs the client one timeout, not a hang. Pure:
/// the caller passes `now` (monotonic nanoseconds) and sends what it is told.
public struct CachetForwardTracker<Request: Sendable>: Sendable {
    /// The outcome of ``start(peer:request:now:)``.
    public enum Start: Sendable, Hashable {
        /// Send the forward; report its reply with this token.
        case started(token: UInt64, deadline: UInt64)
        /// The peer already has ``maximumInFlightPerPeer`` forwards: answer UNAVAILABLE now.
        case overCapacity
    }

    /// The most forwards in flight to one peer.
    public let maximumInFlightPerPeer: Int
    /// How long a forward may take, in nanoseconds.
    public let timeout: UInt64
    var entries: [UInt64: (peer: Int, deadline: UInt64, request: Request)] = [:]
    /// Per peer, tokens in start order; with one timeout for all, deadlines are in the same order.
    var queues: [Int: [UInt64]] = [:]
    var counts: [Int: Int] = [:]
    var nextToken: UInt64 = 1

    /// Creates an empty tracker.
    /// - Parameters:
    ///   - maximumInFlightPerPeer: the cap per peer (at least 1).
    ///   - timeout: the deadline of every forward, in nanoseconds.
    public init(maximumInFlightPerPeer: Int = 1024, timeout: UInt64 = 1_000_000_000) {
        self.maximumInFlightPerPeer = max(1, maximumInFlightPerPeer)
        self.timeout = timeout
    }

    /// Forwards in flight to `peer`.
    /// - Parameter peer: a member index.
    /// - Returns: the count.
    public func inFlight(to peer: Int) -> Int { counts[peer] ?? 0 }

    /// Forwards in flight to every peer.
    public var totalInFlight: Int { entries.count }

    /// Starts a forward to `peer` unless the peer is at its cap.
    /// - Parameters:
    ///   - peer: a member index.
    ///   - request: what to give back on completion or expiry (the client's slot, say).
    ///   - now: the time.
    /// - Returns: a token and deadline, or ``Start/overCapacity``.
    /// - Complexity: amortized O(1).
    public mutating func start(peer: Int, request: Request, now: UInt64) -> Start {
        guard inFlight(to: peer) < maximumInFlightPerPeer else { return .overCapacity }
        let token = nextToken
        nextToken += 1
        let deadline = now &+ timeout
        entries[token] = (peer, deadline, request)
        queues[peer, default: []].append(token)
        counts[peer, default: 0] += 1
        return .started(token: token, deadline: deadline)
    }

    /// A forward's reply arrived (or its connection failed): its request, or `nil` when it had already
    /// expired (the reply is then dropped).
    /// - Parameter token: the forward's token.
    /// - Returns: the request given to ``start(peer:request:now:)``.
    /// - Complexity: O(1) on average (the per-peer queue is trimmed lazily).
    public mutating func finish(_ token: UInt64) -> Request? {
        guard let entry = entries.removeValue(forKey: token) else { return nil }
        counts[entry.peer]! -= 1
        return entry.request
    }

    /// Every forward whose deadline is at or before `now`, removed: answer each UNAVAILABLE and count
    /// a timeout against its peer.
    /// - Parameter now: the time.
    /// - Returns: peer and request of each expired forward, oldest first per peer.
    /// - Complexity: O(e + f) in the forwards expired and those finished since the last call.
    public mutating func expire(now: UInt64) -> [(peer: Int, request: Request)] {
        var expired: [(peer: Int, request: Request)] = []
        for peer in queues.keys.sorted() {
            var queue = queues[peer]!
            var drop = 0
            while drop < queue.count {
                let token = queue[drop]
                guard let entry = entries[token] else {
                    drop += 1
                    continue
                }
                guard entry.deadline <= now else { break }
                entries[token] = nil
                counts[peer]! -= 1
                expired.append((peer, entry.request))
                drop += 1
            }
            queue.removeFirst(drop)
            queues[peer] = queue.isEmpty ? nil : queue
        }
        return expired
    }

    /// The earliest deadline in flight, for the caller's timer.
    /// - Complexity: O(p + f) in the peers and the finished forwards still queued.
    public var nextDeadline: UInt64? {
        queues.values.compactMap { queue in queue.lazy.compactMap { self.entries[$0]?.deadline }.first }.min()
    }
}
