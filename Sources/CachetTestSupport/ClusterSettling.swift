import Foundation

/// Why a cluster node is not serving as a settled member yet, read from its STATS (decoded JSON): a peer not
/// seen up, the node in the minority, or holding its keys. The cluster fixtures poll it after starting
/// their nodes, because a node that probed its peers before they listened counts itself in the minority
/// and then holds (Protocol/CLUSTER.md, "The minority rule").
/// - Parameter stats: the node's STATS object.
/// - Returns: nil when every peer is up and the node neither is in the minority nor holds; else what is not.
public func unsettledReason(ofStats stats: [String: Any]) -> String? {
    let members = stats["cluster_members"] as? [[String: Any]] ?? []
    let states = members.compactMap { $0["state"] as? String }
    guard
        stats["in_minority"] as? Bool != false || stats["holding"] as? Bool != false
            || states.contains(where: { $0 != "up" && $0 != "self" })
    else { return nil }
    let minority = stats["in_minority"] ?? "-"
    let holding = stats["holding"] ?? "-"
    return "states \(states), in_minority \(minority), holding \(holding)"
}

/// Polls the STATS of every node in `ids` until none is unsettled (``unsettledReason(ofStats:)``), for at
/// most `seconds`, blocking the calling thread between polls (for tests on dedicated threads).
/// - Parameters:
///   - ids: the nodes, polled in this order.
///   - seconds: how long to poll.
///   - stats: a node's STATS object, read afresh.
/// - Returns: nil once every node is settled, else the last reason seen, after the node's id.
/// - Throws: what `stats` throws.
public func waitUntilSettled(
    _ ids: [String],
    within seconds: Double,
    stats: (String) throws -> [String: Any]
) throws -> String? {
    let deadline = Date().addingTimeInterval(seconds)
    while true {
        var unsettled: String?
        for id in ids {
            if let reason = unsettledReason(ofStats: try stats(id)) {
                unsettled = "\(id): \(reason)"
                break
            }
        }
        guard let unsettled else { return nil }
        if Date() >= deadline { return unsettled }
        Thread.sleep(forTimeInterval: 0.05)
    }
}
