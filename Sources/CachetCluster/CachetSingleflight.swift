/// Collapses concurrent GETs of one key forwarded from one node into one upstream request. Pure: a table
/// of key → flight → waiters; the caller sends one request per flight and hands the reply to every
/// waiter ``complete(_:)`` returns. Bounded in flights and in waiters per flight.
///
/// A write (PUT or DEL) of a key forwarded from this node calls ``detach(_:)``: GETs that arrive after
/// it start a new flight rather than share a reply that may predate the write.
public struct CachetSingleflight<Key: Hashable & Sendable, Waiter: Sendable>: Sendable {
    /// The outcome of ``join(_:waiter:)``.
    public enum Join: Sendable, Hashable {
        /// The first waiter: send the upstream request for this flight.
        case leader(flight: UInt64)
        /// Joined a flight already in the air: wait for its reply.
        case joined(flight: UInt64)
        /// The table is full (flights or waiters): send this request on its own, uncollapsed.
        case full
    }

    /// The most flights at once.
    public let maximumFlights: Int
    /// The most waiters on one flight.
    public let maximumWaiters: Int
    // Inlinable, so that the node's use of it is specialized for its key and waiter types: unspecialized,
    // every call asked the runtime for the metadata of its dictionaries (BENCHMARKS.md, "Forwarded requests").
    @usableFromInline var current: [Key: UInt64] = [:]
    @usableFromInline var flights: [UInt64: (key: Key, waiters: [Waiter])] = [:]
    @usableFromInline var nextFlight: UInt64 = 1

    /// Creates an empty table.
    /// - Parameters:
    ///   - maximumFlights: the most flights at once (at least 1).
    ///   - maximumWaiters: the most waiters per flight (at least 1).
    @inlinable
    public init(maximumFlights: Int = 4096, maximumWaiters: Int = 1024) {
        self.maximumFlights = max(1, maximumFlights)
        self.maximumWaiters = max(1, maximumWaiters)
    }

    /// Flights in the air.
    @inlinable
    public var flightCount: Int { flights.count }

    /// The flight that a GET of `key` would join now, if any.
    /// - Parameter key: the key.
    /// - Returns: the flight, or nil when none is in the air for it (or it was detached).
    /// - Complexity: O(1) on average.
    @inlinable
    public func flight(for key: Key) -> UInt64? { current[key] }

    /// Adds a waiter for `key`.
    /// - Parameters:
    ///   - key: the key requested.
    ///   - waiter: who to answer.
    /// - Returns: whether to send, wait, or go alone.
    /// - Complexity: O(1) on average.
    @inlinable
    public mutating func join(_ key: Key, waiter: Waiter) -> Join {
        if let flight = current[key] {
            guard flights[flight]!.waiters.count < maximumWaiters else { return .full }
            flights[flight]!.waiters.append(waiter)
            return .joined(flight: flight)
        }
        guard flights.count < maximumFlights else { return .full }
        let flight = nextFlight
        nextFlight += 1
        current[key] = flight
        flights[flight] = (key, [waiter])
        return .leader(flight: flight)
    }

    /// The flight's reply (or failure) arrived: every waiter, in the order they joined, the leader first.
    /// - Parameter flight: the flight.
    /// - Returns: the waiters; empty for a flight already completed.
    /// - Complexity: O(w) in the waiters.
    @inlinable
    public mutating func complete(_ flight: UInt64) -> [Waiter] {
        guard let entry = flights.removeValue(forKey: flight) else { return [] }
        if current[entry.key] == flight { current[entry.key] = nil }
        return entry.waiters
    }

    /// A write of `key` passed: later GETs start a new flight; the flight in the air keeps its waiters.
    /// - Parameter key: the key written.
    /// - Complexity: O(1) on average.
    @inlinable
    public mutating func detach(_ key: Key) {
        current[key] = nil
    }
}
