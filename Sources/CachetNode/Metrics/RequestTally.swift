import CachetWire

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
