/// What a node of a cluster needs to route a request: which member owns a key, the peers' health with the
/// stand-in log, and the owner's hold (nil in a cluster of one member at start).
/// Per loop (its router is), used on the loop's queue.
final class ClusterRouting {
    let router: ForwardRouter
    let health: NodeHealth
    let hold: NodeReturnHold?
    /// Warm-up after a membership change; nil when turned off.
    let warmUp: NodeWarmUp?

    init(router: ForwardRouter, health: NodeHealth, hold: NodeReturnHold?, warmUp: NodeWarmUp? = nil) {
        self.router = router
        self.health = health
        self.hold = hold
        self.warmUp = warmUp
    }
}
