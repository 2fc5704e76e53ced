import CachetRing

/// Every peer's health as one node sees it, and the routing query built on it. Pure: events carry
/// `now` (monotonic nanoseconds) and a random source for jitter. `Protocol/CLUSTER.md`, "Health" and
/// "Forwarding", states the rules.
///
/// Members are numbered as in ``CachetMembership/members`` (ring order). The local member is always
/// routable and has no health of its own.
///
/// **The last peer standing.** A node never marks every peer down: an event that would mark down the only
/// peer not already down holds it suspect instead (``CachetPeerHealth/Transition/heldSuspect``), so a node
/// cut off from everyone (more likely its own network than every other machine) keeps trying its peers
/// rather than failing every key over to itself. In a cluster of two, the one peer is therefore never
/// marked down by the other node: its keys fail fast (UNAVAILABLE on a refused connection) instead of
/// failing over.
public struct CachetClusterHealth: Sendable {
    /// Where a key goes.
    public struct Route: Sendable, Hashable {
        /// The key's owner on the ring (a member index).
        public var owner: Int
        /// The member that serves it now: the owner when routable, else its stand-in.
        public var target: Int
        /// Creates a route.
        /// - Parameters:
        ///   - owner: the key's owner.
        ///   - target: the member that serves it.
        public init(owner: Int, target: Int) {
            self.owner = owner
            self.target = target
        }

        /// Whether `target` is not the owner.
        public var isStandIn: Bool { owner != target }
    }

    /// The membership whose members are tracked.
    public let membership: CachetMembership
    /// The local member's index.
    public let localIndex: Int
    /// Each member's health; the local member's entry stays up and is never consulted.
    public private(set) var peers: [CachetPeerHealth]
    /// For each member down here by timeouts: the peers that said, asked after it went down
    /// (``recordView(of:from:routesThere:askedAt:)``), that they see it down too, with the time it went down
    /// that they confirm.
    private var downConfirmations: [Int: (since: UInt64, by: Set<Int>)] = [:]

    /// Creates the health of every peer, all up.
    /// - Parameters:
    ///   - membership: the members.
    ///   - localID: the local member's id.
    ///   - configuration: the thresholds for every peer.
    /// - Throws: ``CachetClusterError`` `unknownNodeID` (as ``CachetMembership/requireMember(id:)``) when
    ///   `localID` is not a member.
    public init(
        membership: CachetMembership,
        localID: String,
        configuration: CachetPeerHealth.Configuration = CachetPeerHealth.Configuration()
    ) throws(CachetClusterError) {
        _ = try membership.requireMember(id: localID)
        self.membership = membership
        self.localIndex = membership.index(ofID: localID)!
        self.peers = Array(repeating: CachetPeerHealth(configuration: configuration), count: membership.members.count)
    }

    /// Whether requests may go to `member`: the local member always; a peer when up or suspect.
    /// - Parameter member: a member index.
    /// - Returns: whether it is routable.
    public func isRoutable(_ member: Int) -> Bool { member == localIndex || peers[member].isRoutable }

    /// Whether the member has answered this node since it started, or since ``forgetAnswers()`` (always
    /// true for this node itself).
    /// - Parameter member: a member index.
    public func hasAnswered(_ member: Int) -> Bool { member == localIndex || peers[member].hasAnswered }

    /// Whether this node's view of the member dates from before it last reached fewer than a majority, with
    /// no answer or refused connection since (``CachetPeerHealth/isStaleSinceCut``).
    /// - Parameter member: a member index.
    public func isStaleSinceCut(_ member: Int) -> Bool { member != localIndex && peers[member].isStaleSinceCut }

    /// Whether `member`, down in this node's view, is known to be down rather than unreachable from this
    /// node alone: it went down by a refused connection, or, down by timeouts, enough other peers said, when
    /// asked since (``recordView(of:from:routesThere:askedAt:)``), that they see it down too, that with this
    /// node they make a majority of the members. Timeouts may be this node's own: a node cut off from
    /// everyone sees every peer time out, one after another, and must not act on the first that goes down
    /// before it counts itself in the minority; and a connection that lost packets during a partition may
    /// still time out after it healed, while the others reach the member (the register checker found a
    /// node standing in for a member the others still served, and a stale read, when this asked only that
    /// a majority answered since). True for a member that is not down.
    /// - Parameter member: a member index.
    /// - Complexity: O(1).
    public func isDownVerified(_ member: Int) -> Bool {
        guard member != localIndex, let since = peers[member].downByTimeoutsAt else { return true }
        guard let confirmed = downConfirmations[member], confirmed.since == since else { return 1 >= majority }
        return 1 + confirmed.by.count >= majority
    }

    /// The members down here by timeouts that no majority has confirmed (``isDownVerified(_:)``).
    /// - Complexity: O(members).
    public var unverifiedDownMembers: [Int] {
        peers.indices.filter { $0 != localIndex && !isDownVerified($0) }
    }

    /// Every member down here by timeouts, confirmed or not: those to ask the other peers about (a
    /// `viewCheck`, `Protocol/PROTOCOL.md`), so that a peer that sees one up again withdraws its word.
    /// - Complexity: O(members).
    public var downByTimeoutsMembers: [Int] {
        peers.indices.filter { $0 != localIndex && peers[$0].downByTimeoutsAt != nil }
    }

    /// `peer` answered a question about `member` sent at `askedAt`: whether it still routes to it. A peer that
    /// sees it down, asked after it went down here by timeouts, counts towards ``isDownVerified(_:)``.
    /// - Parameters:
    ///   - member: the member asked about.
    ///   - peer: the peer that answered.
    ///   - routesThere: whether the peer routes to `member` (up or suspect in its view).
    ///   - askedAt: when the question was sent.
    public mutating func recordView(of member: Int, from peer: Int, routesThere: Bool, askedAt: UInt64) {
        guard member != localIndex, peer != localIndex, peer != member, peers.indices.contains(member),
            peers.indices.contains(peer), let since = peers[member].downByTimeoutsAt, askedAt >= since
        else { return }
        var confirmed = downConfirmations[member].flatMap { $0.since == since ? $0 : nil } ?? (since: since, by: [])
        if routesThere { confirmed.by.remove(peer) } else { confirmed.by.insert(peer) }
        downConfirmations[member] = confirmed
    }

    /// Forgets which peers answered (``hasAnswered(_:)``): called when this node reaches fewer than a
    /// majority, after which what it saw of each peer may be its own isolation.
    /// - Complexity: O(members).
    public mutating func forgetAnswers() {
        for index in peers.indices { peers[index].forgetAnswer() }
    }

    /// The member's state as STATS reports it: `self`, `up`, `suspect` or `down`.
    /// - Parameter member: a member index.
    /// - Returns: the state.
    public func state(of member: Int) -> CachetClusterMemberState {
        if member == localIndex { return .local }
        switch peers[member].state {
        case .up: return .up
        case .suspect: return .suspect
        case .down: return .down
        }
    }

    /// Whether `member` may go down now: not when every other peer is already down.
    /// - Complexity: O(n) in the members.
    func mayGoDown(_ member: Int) -> Bool {
        peers.indices.contains { $0 != localIndex && $0 != member && peers[$0].isRoutable }
    }

    /// A reply arrived from `member`.
    /// - Parameters:
    ///   - member: a peer's index.
    ///   - now: the time.
    /// - Returns: what changed.
    public mutating func replied(_ member: Int, now: UInt64) -> CachetPeerHealth.Transition? {
        guard member != localIndex else { return nil }
        return peers[member].replied(now: now)
    }

    /// A forward or probe to `member` timed out.
    /// - Parameters:
    ///   - member: a peer's index.
    ///   - now: the time.
    ///   - random: the source of jitter.
    /// - Returns: what changed.
    /// - Complexity: O(n) in the members.
    public mutating func timedOut(
        _ member: Int,
        now: UInt64,
        using random: inout some RandomNumberGenerator
    ) -> CachetPeerHealth.Transition? {
        guard member != localIndex else { return nil }
        let allowed = mayGoDown(member)
        return peers[member].timedOut(now: now, mayGoDown: allowed, using: &random)
    }

    /// A connection to `member` was refused or failed.
    /// - Parameters:
    ///   - member: a peer's index.
    ///   - now: the time.
    ///   - certain: refused (its port is closed), not a connection that failed once open.
    ///   - random: the source of jitter.
    /// - Returns: what changed.
    /// - Complexity: O(n) in the members.
    public mutating func refused(
        _ member: Int,
        now: UInt64,
        certain: Bool = true,
        using random: inout some RandomNumberGenerator
    ) -> CachetPeerHealth.Transition? {
        guard member != localIndex else { return nil }
        let allowed = mayGoDown(member)
        return peers[member].refused(now: now, mayGoDown: allowed, certain: certain, using: &random)
    }

    /// The peers whose probe is due at `now`, each now marked as probing: send each a PING and report
    /// the outcome.
    /// - Parameter now: the time.
    /// - Returns: member indices.
    /// - Complexity: O(n) in the members.
    public mutating func startDueProbes(now: UInt64) -> [Int] {
        var due: [Int] = []
        for member in peers.indices where member != localIndex && peers[member].startProbeIfDue(now: now) {
            due.append(member)
        }
        return due
    }

    /// `member` reached this node on its own while down here: its probe is due now
    /// (``CachetPeerHealth/probeNow(now:)``).
    /// - Parameters:
    ///   - member: the member's index.
    ///   - now: the time.
    public mutating func probeNow(_ member: Int, now: UInt64) {
        guard member != localIndex, peers.indices.contains(member) else { return }
        peers[member].probeNow(now: now)
    }

    /// Whether no peer is up (every one down or suspect): the node may be cut off. When a peer answers
    /// after this was true, the node starts its ``CachetReturnHold`` (`regainedContact(now:)`). `false`
    /// in a cluster of one.
    /// - Complexity: O(n) in the members.
    public var isCutOff: Bool {
        let others = peers.indices.filter { $0 != localIndex }
        return !others.isEmpty && others.allSatisfy { peers[$0].state != .up }
    }

    /// The members this node reaches: itself and every peer that is up. A suspect peer does not count: its
    /// last requests timed out, and the last peer not down is held suspect rather than marked down, so a node
    /// cut off from everyone would otherwise always count it.
    /// - Complexity: O(n) in the members.
    public var reachedMembers: Int {
        1 + peers.indices.count(where: { $0 != localIndex && peers[$0].state == .up })
    }

    /// The fewest members that are a majority of the membership: members / 2 + 1 (2 of 2 or 3, 3 of 4 or 5).
    public var majority: Int { membership.members.count / 2 + 1 }

    /// Whether this node reaches fewer than a majority of the members, itself counted
    /// (``reachedMembers`` < ``majority``): it may be on the small side of a partition while the other side
    /// has marked it down and stands in for its keys, so the node holds its own keys (`Protocol/CLUSTER.md`,
    /// "The minority rule"). Never in a cluster of one; in a cluster of two, whenever the one peer is not up.
    /// - Complexity: O(n) in the members.
    public var isInMinority: Bool { reachedMembers < majority }

    /// The earliest time a probe is due, for the caller's timer; `nil` when no peer is waiting for one.
    /// - Complexity: O(n) in the members.
    public var nextProbeAt: UInt64? {
        peers.indices.compactMap { $0 == localIndex ? nil : peers[$0].probeAt }.min()
    }

    /// Where a key goes: its owner when routable, else the first routable member of its preference list
    /// (all members, in ring order from the owner) — the rule CachetClient follows. The local member is
    /// always routable, so there is always a target.
    /// - Parameter key: the key's bytes.
    /// - Returns: owner and target.
    /// - Complexity: O(k + log p) for a key of k bytes on p points when the owner is routable; the
    ///   preference list's O(p) walk otherwise.
    public func route(_ key: UnsafeRawBufferPointer) -> Route {
        route(hash: CachetRing.hash(key))
    }

    /// ``route(_:)`` for a key's XXH64 hash.
    /// - Parameter hash: the key's hash.
    /// - Returns: owner and target.
    /// - Complexity: as ``route(_:)``.
    public func route(hash: UInt64) -> Route {
        let owner = membership.ring.owner(ofHash: hash)
        if isRoutable(owner) { return Route(owner: owner, target: owner) }
        for member in membership.ring.preferenceList(forHash: hash, count: membership.members.count).dropFirst()
        where isRoutable(member) {
            return Route(owner: owner, target: member)
        }
        return Route(owner: owner, target: localIndex)
    }
}

extension CachetClusterHealth {
    /// The node's whole routing rule: ``route(hash:)``, except that a key whose owner this node stood in
    /// for and has not yet told everything (its phase in `standIns` is not clean) is served here, even
    /// when the owner is routable again — so no key goes back to its owner before its invalidations.
    /// - Parameters:
    ///   - hash: the key's XXH64 hash.
    ///   - standIns: this node's stand-in log.
    /// - Returns: owner and target (the local member while the owner is not clean).
    /// - Complexity: as ``route(hash:)``, plus a lookup of the owner's id while any owner is not clean
    ///   (none otherwise).
    public func route(hash: UInt64, standIns: CachetStandInLog) -> Route {
        let route = route(hash: hash)
        guard route.owner != localIndex, !standIns.owners.isEmpty,
            standIns.phase(of: membership.members[route.owner].id) != .clean
        else { return route }
        return Route(owner: route.owner, target: localIndex)
    }
}

extension CachetClusterMemberState {
    /// A peer that answers.
    public static let up = CachetClusterMemberState(rawValue: "up")
    /// A peer whose last requests timed out, or the last one not down; still routed to.
    public static let suspect = CachetClusterMemberState(rawValue: "suspect")
    /// A peer that is not routed to and is probed with backoff.
    public static let down = CachetClusterMemberState(rawValue: "down")
}
