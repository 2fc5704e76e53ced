import CachetCluster
import CachetLocking
import Dispatch
import Synchronization

/// Warm-up after a membership change (`Protocol/CLUSTER.md`, "Warm-up after a membership change"), as
/// mcrouter's WarmUpRoute does: for a while after the membership changed, a GET that misses this node's
/// memory for a key it owns now but did not own before asks the key's previous owner (one hop, half the
/// forward deadline) and keeps what it answers, so that a member added or removed does not turn the keys
/// that moved into misses.
///
/// What keeps it from reading back an older value: a key written or deleted here since the change is
/// never warmed (every PUT and DEL of an own key is noted, under the lock, before it is applied, and a
/// warm-up stores its answer only if the key was not noted meanwhile), and it asks a previous owner only
/// once that member has been seen reading this node's membership, or has left it (``MembershipComparison``):
/// a previous owner still on the old membership would take a write of the key itself, where one on the new
/// membership confirms it here first. At most ``maximumNoted`` keys are noted per change; beyond, warm-up
/// stops until the next change.
///
/// Thread-safe: a request pays one atomic load of the membership generation and one of a flag when no
/// warm-up is under way; the rest takes the lock.
final class NodeWarmUp: Sendable {
    private struct State {
        var generation = 0
        /// The membership before the change and this node's id, while the window lasts.
        var previous: CachetMembership?
        var nodeID = ""
        /// When the window ends (uptime nanoseconds).
        var until: UInt64 = 0
        /// Keys written or deleted here since the change.
        var noted: Set<[UInt8]> = []
        var full = false
        /// The window opened at start for a node that may have just joined: it warms only once a peer was
        /// seen reading another membership (the others had not been told of it yet), which a cluster that
        /// starts together never shows.
        var joining = false
        /// When the change the window is for happened (uptime nanoseconds; 0: none yet).
        var changedAt: UInt64 = 0
        /// The hash of ``previous`` (for a joining node, compared with the changes its peers report).
        var previousHash = ""
    }

    private let membership: CachetNodeMembership
    private let comparison: MembershipComparison
    /// Whether a joining node takes a peer's reported change as the sign that it was just added.
    private let learnsFromPeers: Bool
    /// How long a window lasts after a change, in nanoseconds; 0 turns warm-up off.
    private let window: UInt64
    private let state = CachetLock(State())
    /// The generation last looked at, and whether a window may be open.
    private let seenGeneration = Atomic<Int>(0)
    private let open = Atomic<Bool>(false)
    /// GETs answered from a previous owner, and those it could not answer (STATS `warm_up_hits`,
    /// `warm_up_misses`).
    let hits = Atomic<Int>(0)
    let misses = Atomic<Int>(0)

    /// Keys noted per change before warm-up stops.
    static let maximumNoted = 65536

    /// - Parameters:
    ///   - membership: the node's membership, whose changes open a window.
    ///   - comparison: which peers read another membership.
    ///   - window: seconds a window lasts (`--warm-up-seconds`); 0 turns warm-up off.
    ///   - joining: the node starts with nothing from before (no entries, no stand-in log): it may be a
    ///     member just added, so a window opens at once with the members but itself as the membership
    ///     before, used once a peer has been seen reading another membership (the others not told yet).
    ///   - learnsFromPeers: a joining node on a new data directory (not one without a directory, which cannot
    ///     tell a first start from a restart that lost the keys it had written since it joined) may also take
    ///     a peer's report of its change, from the members but this one to this membership, as the sign
    ///     that it was just added.
    init(
        membership: CachetNodeMembership,
        comparison: MembershipComparison,
        window: Double,
        joining: Bool,
        learnsFromPeers: Bool = false
    ) {
        self.learnsFromPeers = learnsFromPeers
        self.membership = membership
        self.comparison = comparison
        self.window = UInt64(max(0, window) * 1e9)
        let generation = membership.generation
        seenGeneration.store(generation, ordering: .relaxed)
        let nodeID = membership.nodeID
        let current = membership.current
        let others = current.members.filter { $0.id != nodeID }
        let before =
            joining && window > 0 && !others.isEmpty
            ? try? CachetMembership(members: others, virtualNodesPerMember: current.virtualNodesPerMember) : nil
        let now = DispatchTime.now().uptimeNanoseconds
        state.withLock { state in
            state.generation = generation
            state.previous = before
            state.nodeID = nodeID
            state.until = now &+ self.window
            state.joining = before != nil
            state.previousHash = before?.membershipHashText ?? ""
        }
        open.store(before != nil, ordering: .releasing)
    }

    /// Opens a window when the membership changed since last looked at.
    @inline(__always)
    private func refreshIfChanged() {
        let generation = membership.generation
        guard generation != seenGeneration.load(ordering: .relaxed), window > 0 else { return }
        let previous = membership.previous
        let nodeID = membership.nodeID
        let isOpen = state.withLock { state -> Bool in
            if state.generation != generation {
                state.generation = generation
                // A reload that changed nothing (the same file, SIGHUP to every node) keeps the window.
                if let previous, previous.changedAt != state.changedAt {
                    state.changedAt = previous.changedAt
                    state.noted = []
                    state.full = false
                    state.previous = previous.membership
                    state.previousHash = previous.membership.membershipHashText
                    state.joining = false
                    state.nodeID = nodeID
                    state.until = previous.changedAt &+ window
                }
            }
            return state.previous != nil
        }
        seenGeneration.store(generation, ordering: .relaxed)
        open.store(isOpen, ordering: .releasing)
    }

    /// Notes a PUT or DEL of one of this node's keys, before it is applied: the key is never warmed in this
    /// window.
    @inline(__always)
    func noteWrite(_ key: UnsafeRawBufferPointer) {
        refreshIfChanged()
        guard open.load(ordering: .acquiring) else { return }
        let full = state.withLock { state -> Bool in
            guard state.previous != nil, !state.full else { return state.full }
            if state.noted.count >= Self.maximumNoted {
                // Warm-up stops until the next change, and writes stop paying for the lock.
                state.full = true
                state.previous = nil
                state.noted = []
                return true
            }
            state.noted.insert(Array(key))
            return false
        }
        if full { open.store(false, ordering: .releasing) }
    }

    /// Whether this node may answer a peer's warm-up of `key`: it owns the key in the membership in force
    /// (a member being removed, which still serves its keys), or owned it before its last membership change,
    /// within a window of that change (an older change leaves copies that may be stale).
    func servesWarmUp(_ key: UnsafeRawBufferPointer) -> Bool {
        let nodeID = membership.nodeID
        if membership.current.owner(of: key).id == nodeID { return true }
        guard let previous = membership.previous,
            DispatchTime.now().uptimeNanoseconds < previous.changedAt &+ window
        else { return false }
        return previous.membership.owner(of: key).id == nodeID
    }

    /// A CLEAR here: the window closes, so that no key comes back from a previous owner.
    func noteClear() {
        refreshIfChanged()
        guard open.load(ordering: .acquiring) else { return }
        state.withLock { state in
            state.previous = nil
            state.noted = []
        }
    }

    /// The member to ask for `key`, which this node owns and missed: its owner before the change, when that
    /// was another member, the window is open, the key was not written here since, and every routable peer
    /// reads this node's membership. Nil otherwise.
    func source(for key: UnsafeRawBufferPointer) -> CachetClusterMember? {
        refreshIfChanged()
        guard open.load(ordering: .acquiring) else { return nil }
        let now = DispatchTime.now().uptimeNanoseconds
        let joinSeen = comparison.sawDisagreement.load(ordering: .relaxed)
        let source = state.withLock { state -> CachetClusterMember? in
            guard let previous = state.previous else { return nil }
            if state.joining && !joinSeen {
                // Started with nothing: a member just added only once a peer shows the change, as a peer
                // still on another membership, or one that changed from the members but this one to ours.
                guard learnsFromPeers, comparison.peerChanged(from: state.previousHash) != nil else { return nil }
            }
            guard now < state.until, !state.full else {
                state.previous = nil
                state.noted = []
                return nil
            }
            let owner = previous.owner(of: key)
            guard owner.id != state.nodeID, !state.noted.contains(Array(key)) else { return nil }
            return owner
        }
        // The previous owner must route the key here too (or have left the membership): then a write that
        // a node on the old membership still sends it is confirmed here before it is acknowledged, which
        // drops what was warmed; a previous owner on the old membership would take it itself.
        guard let source, comparison.agrees(source.id) || membership.current.member(id: source.id) == nil else {
            return nil
        }
        return source
    }

    /// Stores what the previous owner answered for `key`, through `store`, unless the key was written here
    /// since the request left (or the window closed): under the lock, so that a write noted after this
    /// check is applied after the stored value, and wins.
    /// - Returns: whether it was stored.
    func keep(_ key: [UInt8], store: () -> Void) -> Bool {
        state.withLock { state in
            guard state.previous != nil, !state.full, !state.noted.contains(key) else { return false }
            store()
            return true
        }
    }
}
