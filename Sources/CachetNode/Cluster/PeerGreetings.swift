import CachetLocking
import CachetWire
import Dispatch
import Logging

/// What a member tells all its peers at once (`Protocol/CLUSTER.md`, "A member that stops"): a greeting
/// before it serves, and that it is leaving when it stops. Each is a PING from the first loop's forwarder
/// to every peer, waited for up to the forward deadline (at most a second).
struct PeerGreetings {
    /// The first loop's forwarder, which sends the PINGs on its loop.
    let forwarder: PeerForwarder
    /// The forward deadline (`--forward-timeout`), in seconds.
    let forwardTimeout: Double
    let logger: Logger

    /// Starts telling every peer that this member is leaving (`Protocol/CLUSTER.md`, "A member that
    /// stops"): they mark it down at once and send its keys to their stand-ins, rather than finding its port
    /// closed request by request. Returns what waits for their answers, up to the forward deadline (at most
    /// a second) from now; a peer that does not answer finds the port closed instead.
    func announceLeaving(id: String) -> () -> (answered: Int, peers: Int) {
        logger.notice("leaving the cluster: telling the peers", metadata: ["cluster.member": "\(id)"])
        return pingEveryPeer(CachetCommand.leavingNotice(memberID: id, id: 0))
    }

    /// Before the node accepts its first connection, a PING to every peer (waiting up to the forward
    /// deadline, at most a second; connections wait in the listening socket's backlog meanwhile): a member
    /// that restarts knows at once which peers answer, so that, while it holds, it passes its keys to a
    /// stand-in that answered rather than refuse them for want of an answer. A peer that does not answer is
    /// left to the probes, and not counted down: it may not have started yet (counting it down would make
    /// the first members of a cluster that starts take themselves for cut off), or be greeting its own
    /// peers (members that start together answer each other once their greetings time out).
    func greet() {
        let greeted = pingEveryPeer(CachetCommand.ping.encoded(id: 0, flags: .forwarded), recordingFailures: false)()
        logger.info("peers greeted", metadata: ["cluster.peers_answered": "\(greeted.answered)/\(greeted.peers)"])
    }

    /// Sends `frame` to every peer from the first loop; returns what waits for the answers, up to the
    /// forward deadline (at most a second) from now.
    private func pingEveryPeer(
        _ frame: [UInt8],
        recordingFailures: Bool = true
    ) -> () -> (answered: Int, peers: Int) {
        let result = CachetLock((answered: 0, peers: 0))
        let done = DispatchSemaphore(value: 0)
        let deadline = DispatchTime.now() + min(forwardTimeout, 1)
        forwarder.loop.execute {
            forwarder.pingEveryPeer(frame, recordingFailures: recordingFailures) { answered, peers in
                result.withLock { $0 = (answered, peers) }
                done.signal()
            }
        }
        return {
            _ = done.wait(timeout: deadline)
            return result.withLock { $0 }
        }
    }
}
