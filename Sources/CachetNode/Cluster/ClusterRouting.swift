/// The cluster parts a node's loops route requests with (``RequestRouter``): which member owns a key, the
/// peers' health with the stand-in ledger, the owner's hold (nil in a cluster of one member at start) and
/// warm-up after a membership change (nil when turned off).
struct ClusterRouting {
    let router: ForwardRouter
    let health: NodeHealth
    let hold: NodeReturnHold?
    let warmUp: NodeWarmUp?

    init(router: ForwardRouter, health: NodeHealth, hold: NodeReturnHold?, warmUp: NodeWarmUp? = nil) {
        self.router = router
        self.health = health
        self.hold = hold
        self.warmUp = warmUp
    }
}
