/// Where a request for a key goes (``RequestRouter/route(_:key:in:output:)``).
enum RouteDecision {
    /// Served here, as usual.
    case here
    /// Answered already (a miss).
    case answered
    /// Forwarded.
    case pending(PendingOperation)
}
