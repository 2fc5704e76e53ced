import CachetWire
import Synchronization

/// Request counters of one event loop. Only that loop's queue adds to them (relaxed atomics, so no cache
/// line is shared between loops); STATS reads and sums them from any queue.
final class RequestCounters: Sendable {
    let gets = Atomic<Int>(0)
    let hits = Atomic<Int>(0)
    let misses = Atomic<Int>(0)
    let puts = Atomic<Int>(0)
    let deletes = Atomic<Int>(0)
    let diskHits = Atomic<Int>(0)
    let badRequests = Atomic<Int>(0)
    /// Requests sent on to the member that owns their key.
    let forwards = Atomic<Int>(0)
    /// Forwarded GETs that shared the request of an earlier GET of the same key still in the air (sent
    /// nothing of their own; counted in ``forwards`` too).
    let forwardsCollapsed = Atomic<Int>(0)
    /// Forwards answered UNAVAILABLE here: the owner refused, failed, or did not answer in time.
    let forwardFailures = Atomic<Int>(0)
    /// Requests marked `forwarded` for a key this node does not own (served here all the same).
    let routingDisagreements = Atomic<Int>(0)
    /// Requests for this node's own keys answered here with a miss (GET) or refused (PUT, DEL) because it
    /// was in the minority (not those sent on to a stand-in, which are in ``forwards``).
    let minorityMisses = Atomic<Int>(0)
    /// How long requests take, by command.
    let latencies = RequestLatencies()

    @inline(__always)
    static func bump(_ counter: borrowing Atomic<Int>) {
        counter.wrappingAdd(1, ordering: .relaxed)
    }
}

/// A snapshot of request counters summed over every loop.
struct RequestCounts {
    var gets = 0
    var hits = 0
    var misses = 0
    var puts = 0
    var deletes = 0
    var diskHits = 0
    var badRequests = 0
    var forwards = 0
    var forwardsCollapsed = 0
    var forwardFailures = 0
    var routingDisagreements = 0
    var minorityMisses = 0

    mutating func add(_ counters: RequestCounters) {
        gets += counters.gets.load(ordering: .relaxed)
        hits += counters.hits.load(ordering: .relaxed)
        misses += counters.misses.load(ordering: .relaxed)
        puts += counters.puts.load(ordering: .relaxed)
        deletes += counters.deletes.load(ordering: .relaxed)
        diskHits += counters.diskHits.load(ordering: .relaxed)
        badRequests += counters.badRequests.load(ordering: .relaxed)
        forwards += counters.forwards.load(ordering: .relaxed)
        forwardsCollapsed += counters.forwardsCollapsed.load(ordering: .relaxed)
        forwardFailures += counters.forwardFailures.load(ordering: .relaxed)
        routingDisagreements += counters.routingDisagreements.load(ordering: .relaxed)
        minorityMisses += counters.minorityMisses.load(ordering: .relaxed)
    }
}

/// The command a request's duration is counted under in ``RequestLatencies`` (memcached_exporter's names
/// for the command label).
enum LatencyCommand: Int, CaseIterable {
    case get
    case set
    case delete
    /// CLEAR, STATS, PING, AUTH, and requests refused before their command was known.
    case other

    init(_ opcode: CachetOpcode) {
        switch opcode {
        case .get: self = .get
        case .put: self = .set
        case .delete: self = .delete
        default: self = .other
        }
    }

    /// The `command` label.
    var label: String {
        switch self {
        case .get: return "get"
        case .set: return "set"
        case .delete: return "delete"
        case .other: return "other"
        }
    }
}

/// Requests answered in one turn of a connection, by command: each is counted once, with the turn's
/// duration (``RequestLatencies/observe(_:nanoseconds:)``). Plain integers on the loop's stack: the only
/// cost on the request path is one increment.
struct RequestTally {
    var get = 0
    var set = 0
    var delete = 0
    var other = 0

    @inline(__always)
    mutating func count(_ opcode: CachetOpcode) {
        switch opcode {
        case .get: get &+= 1
        case .put: set &+= 1
        case .delete: delete &+= 1
        default: other &+= 1
        }
    }

    /// Takes back the request that suspended the turn: it is counted when it completes.
    mutating func uncount(_ command: LatencyCommand) {
        switch command {
        case .get: get -= 1
        case .set: set -= 1
        case .delete: delete -= 1
        case .other: other -= 1
        }
    }

    var isEmpty: Bool { self.get == 0 && self.set == 0 && delete == 0 && other == 0 }
}

/// How long requests take on one event loop, by command, as Prometheus histograms: from the turn that
/// read a request's bytes to its reply handed to the socket (a request that waits for the disk tier, a
/// peer or a fan-out: until its reply is written, after the wait). Only that loop's queue adds (relaxed
/// atomics, one turn at a time, not one request); `/metrics` sums the loops at scrape time.
final class RequestLatencies: @unchecked Sendable {
    /// The buckets' upper bounds, in nanoseconds: 25 µs to 1 s.
    static let bounds: [UInt64] = [
        25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000,
        50_000_000, 100_000_000, 250_000_000, 500_000_000, 1_000_000_000,
    ]
    /// Per command: a count per bucket (not cumulative), one past the last bound, then the sum of
    /// durations in nanoseconds.
    private static let cellsPerCommand = bounds.count + 2
    /// Written only on the loop's queue, read from any; atomics, so no read is torn. `@unchecked` for the
    /// pointer: the cells are allocated once, never moved, and freed with the object.
    private let cells: UnsafeMutablePointer<Atomic<Int>>
    private static let cellCount = LatencyCommand.allCases.count * cellsPerCommand

    init() {
        cells = .allocate(capacity: Self.cellCount)
        for index in 0..<Self.cellCount { (cells + index).initialize(to: Atomic(0)) }
    }

    deinit {
        cells.deinitialize(count: Self.cellCount)
        cells.deallocate()
    }

    /// Counts `count` requests of `command` that took `nanoseconds` each.
    func observe(_ command: LatencyCommand, count: Int = 1, nanoseconds: UInt64) {
        guard count > 0 else { return }
        var bucket = 0
        while bucket < Self.bounds.count && nanoseconds > Self.bounds[bucket] { bucket += 1 }
        let base = command.rawValue * Self.cellsPerCommand
        cells[base + bucket].wrappingAdd(count, ordering: .relaxed)
        cells[base + Self.cellsPerCommand - 1].wrappingAdd(
            count &* Int(truncatingIfNeeded: nanoseconds),
            ordering: .relaxed
        )
    }

    /// Counts a turn's requests, each with the turn's duration.
    func observe(_ tally: RequestTally, nanoseconds: UInt64) {
        observe(.get, count: tally.get, nanoseconds: nanoseconds)
        observe(.set, count: tally.set, nanoseconds: nanoseconds)
        observe(.delete, count: tally.delete, nanoseconds: nanoseconds)
        observe(.other, count: tally.other, nanoseconds: nanoseconds)
    }

    /// Adds this loop's figures for `command` to `histogram`.
    func add(_ command: LatencyCommand, to histogram: inout LatencyHistogram) {
        let base = command.rawValue * Self.cellsPerCommand
        if histogram.buckets.isEmpty { histogram.buckets = Array(repeating: 0, count: Self.bounds.count + 1) }
        for bucket in 0...Self.bounds.count {
            histogram.buckets[bucket] += cells[base + bucket].load(ordering: .relaxed)
        }
        histogram.sumNanoseconds += cells[base + Self.cellsPerCommand - 1].load(ordering: .relaxed)
    }
}

/// One command's durations summed over the loops: a count per bucket (the last past every bound), and
/// their sum.
struct LatencyHistogram {
    var buckets: [Int] = []
    var sumNanoseconds = 0

    var count: Int { buckets.reduce(0, +) }
}
