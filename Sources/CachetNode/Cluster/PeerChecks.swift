import CachetCluster
import CachetWire

/// The questions the probing loop puts to the peers on each tick, besides its PINGs (`Protocol/CLUSTER.md`):
/// whether this node's hold after an absence may end (``CachetHoldCheck``, "The owner's hold"), and whether
/// the others still route to a member this node marked down on timeouts (``CachetViewCheck``, "Health").
/// At most one round of each at a time; the answers go to ``NodeHealth``. A peer's failure to answer is left
/// to the probes.
///
/// `@unchecked Sendable` as ``PeerForwarder``: used only on its forwarder's loop.
final class PeerChecks: @unchecked Sendable {
    private unowned let forwarder: PeerForwarder
    private let health: NodeHealth
    /// Whether a round of hold checks is on its way.
    private var holdCheckInFlight = false
    /// The members a round of view checks is on its way about.
    private var viewChecksInFlight: Set<String> = []

    init(forwarder: PeerForwarder, health: NodeHealth) {
        self.forwarder = forwarder
        self.health = health
    }

    /// Starts the rounds that are due and not already on their way.
    func askDue() {
        askHold()
        askViews()
    }

    /// While this node holds its own keys after an absence and every peer is routable in its view, asks every
    /// peer whether the hold may end; when each answers ``CachetHoldCheck/Answer/clear``, the hold ends.
    private func askHold() {
        guard !holdCheckInFlight, let (start, check) = health.holdCheckDue() else { return }
        holdCheckInFlight = true
        let health = health
        forwarder.ask(health.peers(), check.encoded(id: 0), recordingFailures: false) { [weak self] outcomes in
            self?.holdCheckInFlight = false
            let clear = outcomes.allSatisfy { Self.answer(of: $0) == CachetHoldCheck.Answer.clear.rawValue }
            if clear && !outcomes.isEmpty { health.holdCleared(startedAt: start, peers: outcomes.count) }
        }
    }

    /// For each member down here by timeouts, asks every other routable peer whether it still routes to it:
    /// this node stands in for it only while a majority of the members, itself counted, see it down.
    private func askViews() {
        let health = health
        for (member, peers, askedAt) in health.viewChecksDue() where !viewChecksInFlight.contains(member.id) {
            guard !peers.isEmpty else { continue }
            viewChecksInFlight.insert(member.id)
            let frame = CachetViewCheck(memberID: member.id).encoded(id: 0)
            forwarder.ask(peers, frame, recordingFailures: false) { peer, outcome in
                // Each answer counts as it comes: one slow peer does not hold up the others' words.
                guard let byte = Self.answer(of: outcome) else { return }
                health.recordView(of: member, from: peer, answer: .init(rawValue: byte), askedAt: askedAt)
            } completion: { [weak self] _ in
                self?.viewChecksInFlight.remove(member.id)
            }
        }
    }

    /// The one-byte answer of an OK reply to a check; nil for anything else.
    private static func answer(of outcome: ForwardOutcome) -> UInt8? {
        guard case .answered(.ok, let body) = outcome, body.count == 1 else { return nil }
        return body[0]
    }
}
