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
