import CachetCluster
import CachetIO
import CachetWire
import Dispatch
import Logging

/// Forwards requests for keys this node does not own to their owners, for one of the node's event loops:
/// one multiplexed connection per peer (``PeerChannel``), opened on first use and again after it fails,
/// hosted by a ``CachetEventLoop`` that runs on the node loop's own queue, so that a forward and its
/// reply are handled where the client's connection is, with no hop and no lock. See `Protocol/CLUSTER.md`,
/// "Forwarding".
///
/// Each forward has a deadline (`--forward-timeout`); at most `maximumInFlightPerPeer` are in flight to
/// one peer, and more are answered UNAVAILABLE at once, so one slow peer cannot hold the requests bound
/// for others. Used only on its loop's queue, but for ``start()`` and ``stop()``.
final class PeerForwarder {
    /// Forwards in flight to one peer at most.
    static let maximumInFlightPerPeer = 1024

    let loop: CachetEventLoop
    let timeout: Duration
    private let maximumReplyLength: Int
    private let logger: Logger
    private var channels: [CachetClusterMember: PeerChannel] = [:]

    /// - Parameters:
    ///   - queue: the node loop's queue, which the peer connections share.
    ///   - index: the node loop's index, for the labels.
    ///   - timeout: each forward's deadline, the connect included.
    ///   - maximumReplyLength: the largest reply payload accepted from a peer.
    ///   - logger: where connection failures are logged.
    init(
        queue: DispatchQueue,
        index: Int,
        timeout: Duration,
        maximumReplyLength: Int,
        logger: Logger
    ) throws(CachetIOError) {
        loop = try CachetEventLoop(label: "cachet.peers.\(index)", queue: queue)
        self.timeout = timeout
        self.maximumReplyLength = maximumReplyLength
        self.logger = logger
    }

    /// Starts the peer loop. Called once, off the loop's queue.
    func start() { loop.start() }

    /// Closes every peer connection, failing what is in flight. Callable from any thread.
    func stop() { loop.stop() }

    /// Forwards in flight now, over every peer.
    var inFlight: Int { channels.values.reduce(0) { $0 + $1.pending.count } }

    /// Sends `request` (a whole request frame, `forwarded` flag set) to `member`; `completion` runs on the
    /// loop's queue with the reply or with `unavailable`, at the latest when the deadline passes.
    func forward(
        _ request: inout [UInt8],
        to member: CachetClusterMember,
        completion: @escaping (ForwardOutcome) -> Void
    ) {
        let channel = channel(for: member)
        guard channel.pending.count < Self.maximumInFlightPerPeer else {
            completion(
                .unavailable("\(channel.name) has \(Self.maximumInFlightPerPeer) forwarded requests in flight already")
            )
            return
        }
        channel.send(&request, timeout: timeout, completion: completion)
    }

    private func channel(for member: CachetClusterMember) -> PeerChannel {
        if let channel = channels[member], channel.state != .closed { return channel }
        let channel = PeerChannel(member: member, maximumReplyLength: maximumReplyLength)
        channel.onClose = { [weak self] closed in
            guard let self, channels[closed.member] === closed else { return }
            channels[closed.member] = nil
        }
        channels[member] = channel
        loop.connect(channel, to: CachetAddress(host: member.host, port: member.port), timeout: timeout)
        return channel
    }
}
