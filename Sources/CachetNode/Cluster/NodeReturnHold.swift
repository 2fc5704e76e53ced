import CachetCluster
import CachetLocking
import Dispatch
import Logging
import Synchronization

/// The owner's hold of a node in a cluster of more than one (`Protocol/CLUSTER.md`, "The owner's hold"):
/// for `holdPeriod` after it may have been away, a GET of a key it owns misses, since a stand-in may have
/// replaced the key's value meanwhile and not yet told it. It holds from its start when its disk tier
/// brings entries from before (a node that starts empty serves only values written since); after a gap between
/// two ticks longer than the stall threshold (the process was stopped, SIGSTOP or a frozen machine); and
/// when a peer answers after every peer had failed (it may have been cut off), or, while every peer has
/// failed, when a peer's request reaches it: after a partition heals, a peer that sees it back may forward
/// a GET before its own probes are answered. PUT, DEL and CLEAR are served all the while. Each
/// invalidation a stand-in delivers while the node holds (a request with the `invalidation` flag) keeps the hold until at least `quietPeriod` after it, within `maximumHold` of the
/// hold's start: a delivery that outlasts the hold period is waited for rather than overtaken.
///
/// **The minority rule** (`Protocol/CLUSTER.md`, "The minority rule"): while the node reaches fewer than a
/// majority of the members (``NodeHealth`` sets ``setInMinority(_:reached:members:)`` when a peer's state
/// changes), it holds too, for as long as that lasts, and its hold starts when it reaches a majority again,
/// as when contact returns: it cannot tell its own isolation from dead peers, and the other side may have
/// marked it down and stood in for its keys. `--serve-own-keys-in-minority` turns the rule off.
///
/// A timer on a queue of its own ticks every 50 ms; the request path also checks the time since the last
/// tick, so that requests read right after a stop are judged before the timer has run. Thread-safe: the
/// request path reads four atomics; changes take the lock.
final class NodeReturnHold: Sendable {
    private let state: CachetLock<CachetReturnHold>
    private let holdUntil: Atomic<UInt64>
    private let lastTick: Atomic<UInt64>
    /// Whether every peer has failed, as the node's health last saw it.
    private let cutOff = Atomic<Bool>(false)
    private let stallThreshold: UInt64
    /// Whether the minority rule is on (off with `--serve-own-keys-in-minority`).
    let holdsInMinority: Bool
    /// Whether a hold ends once every peer clears it (off with `--hold-full-period`).
    let releasesEarly: Bool
    /// Whether the node is in the minority now and the rule is on. Cleared (releasing) only after the hold
    /// that follows has been stored, so that a request that sees it clear sees that hold.
    private let minority = Atomic<Bool>(false)
    /// The members reached and in the membership when the node last entered the minority, for messages.
    private let reach = CachetLock<(reached: Int, members: Int)>((reached: 0, members: 0))
    private let timer = CachetLock<(any DispatchSourceTimer)?>(nil)
    /// The keys stand-ins have handed back or invalidated in the current hold (``takesHandBack(_:)``).
    private let told = CachetLock<Set<[UInt8]>>([])
    /// Invalidations that made a hold last longer (STATS `hold_extensions`).
    let extensions = Atomic<Int>(0)
    /// Holds that ended early because every peer cleared them (STATS `holds_released`).
    let releases = Atomic<Int>(0)
    /// How many times a hold started because this node may have been away while it ran (a stall, or
    /// contact regained after every peer had failed or after the minority): ``NodeHealth`` compares it
    /// with the count it last saw, and then no longer serves the copies it wrote as a stand-in before.
    private let absences = Atomic<UInt64>(0)
    /// Where a hold that starts is logged (one line per start, with its reason).
    private let logger: Logger?
    private static let tickInterval: UInt64 = 50_000_000

    /// Starts holding now, if the node starts with entries from before.
    /// - Parameters:
    ///   - holdPeriod: nanoseconds owned keys miss after a return.
    ///   - stallThreshold: a gap between ticks longer than this, in nanoseconds, is a stall.
    ///   - holdingAtStart: whether the node starts with entries from before (its disk tier's).
    ///   - quietPeriod: nanoseconds a hold lasts at least after an invalidation received while holding.
    ///   - maximumHold: nanoseconds a hold lasts at most with its extensions; nil: 4 × `holdPeriod`.
    ///   - holdsInMinority: whether the node holds its own keys while it reaches fewer than a majority
    ///     (false: `--serve-own-keys-in-minority`).
    ///   - releasesEarly: whether a hold ends once every peer clears it (false: `--hold-full-period`).
    init(
        holdPeriod: UInt64,
        stallThreshold: UInt64,
        holdingAtStart: Bool,
        quietPeriod: UInt64 = 0,
        maximumHold: UInt64? = nil,
        holdsInMinority: Bool = true,
        releasesEarly: Bool = true,
        logger: Logger? = nil
    ) {
        self.logger = logger
        let now = DispatchTime.now().uptimeNanoseconds
        let hold = CachetReturnHold(
            holdPeriod: holdPeriod,
            stallThreshold: stallThreshold,
            now: now,
            holdingAtStart: holdingAtStart,
            quietPeriod: quietPeriod,
            maximumHold: maximumHold
        )
        state = CachetLock(hold)
        holdUntil = Atomic(hold.holdUntil)
        lastTick = Atomic(now)
        self.stallThreshold = stallThreshold
        self.holdsInMinority = holdsInMinority
        self.releasesEarly = releasesEarly
    }

    /// Starts the ticks.
    func start() {
        let source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "cachet.hold", qos: .userInitiated))
        source.schedule(deadline: .now(), repeating: .nanoseconds(Int(Self.tickInterval)))
        source.setEventHandler { [weak self] in _ = self?.tick() }
        source.activate()
        timer.withLockUnchecked { $0 = source }
    }

    /// Stops the ticks.
    func stop() {
        timer.withLockUnchecked { timer in
            timer?.cancel()
            timer = nil
        }
    }

    /// Whether a GET of a key this node owns must miss now: in the minority, or after it may have been away.
    func isHolding() -> Bool {
        isInMinority || isHoldingAfterAbsence()
    }

    /// Whether the node holds its own keys because it reaches fewer than a majority of the members (always
    /// false with the rule off). One atomic load.
    var isInMinority: Bool { minority.load(ordering: .acquiring) }

    /// Whether the node holds after it may have been away (a start, a stall, regained contact), whatever
    /// the minority rule says.
    func isHoldingAfterAbsence() -> Bool {
        let now = DispatchTime.now().uptimeNanoseconds
        if now &- lastTick.load(ordering: .relaxed) > stallThreshold { return tick() }
        return now < holdUntil.load(ordering: .relaxed)
    }

    /// A request with the `invalidation` flag arrived (a stand-in's DEL or CLEAR): while holding, the hold
    /// lasts until at least the quiet period after it. Costs one atomic load when not holding.
    func invalidationReceived() {
        let now = DispatchTime.now().uptimeNanoseconds
        // Right after a stop, the stall's hold first (as ``isHolding()`` does).
        if now &- lastTick.load(ordering: .relaxed) > stallThreshold { tick() }
        guard now < holdUntil.load(ordering: .relaxed) else { return }
        let extended = state.withLock { hold in
            let extended = hold.invalidationReceived(now: now)
            holdUntil.store(hold.holdUntil, ordering: .relaxed)
            return extended
        }
        if extended { extensions.wrappingAdd(1, ordering: .relaxed) }
    }

    /// Whether a stand-in's hand-back of `key` (a PUT with `invalidation`) may be stored as it is
    /// (`Protocol/CLUSTER.md`, "Handing back values"): only while the node holds after an absence, and only
    /// for the first word of the key in this hold. A key another stand-in has already told it of (handed
    /// back or invalidated) may have two versions in the cluster, and this node cannot tell which is the
    /// later: the hand-back then deletes the key instead. After the hold, a late hand-back deletes too (a
    /// write taken here since may be newer). Remembers at most ``maximumHandBacks`` keys per hold; beyond,
    /// hand-backs delete.
    /// - Parameter key: the key handed back.
    /// - Returns: whether to store the value.
    func takesHandBack(_ key: UnsafeRawBufferPointer) -> Bool {
        told(key, handBack: true)
    }

    /// Another word on `key` than a hand-back: a stand-in's invalidation or confirmation of it (a DEL with
    /// `invalidation`), or a write of it this node passed on to the stand-in while holding. A later
    /// hand-back of it in this hold deletes rather than stores.
    func invalidated(_ key: UnsafeRawBufferPointer) {
        _ = told(key, handBack: false)
    }

    /// Keys a hold remembers hand-backs and invalidations of.
    static let maximumHandBacks = 65536

    private func told(_ key: UnsafeRawBufferPointer, handBack: Bool) -> Bool {
        guard isHoldingAfterAbsence() else {
            // Between holds nothing is remembered: the next hold starts afresh.
            if handBack { told.withLock { $0 = [] } }
            return false
        }
        return told.withLock { keys in
            guard keys.count < Self.maximumHandBacks else { return false }
            return keys.insert(Array(key)).inserted && handBack
        }
    }

    /// How many times this node may have been away since it started (a stall, or contact regained), for
    /// ``NodeHealth``: while it was away, the others may have given the keys it stood in for to another
    /// member, which took writes of them; its own copies of those keys may be older. One atomic load.
    var absenceCount: UInt64 { absences.load(ordering: .acquiring) }

    /// When the hold in force after an absence started, for a hold check (``NodeHealth/holdCheckDue()``),
    /// once the peers may be asked (``CachetReturnHold/mayAskToRelease(now:)``: a quiet period after it
    /// started); nil when the node does not hold after an absence, it is too early, or the hold never ends
    /// early (`--hold-full-period`).
    func holdStartIfHolding() -> UInt64? {
        guard releasesEarly, isHoldingAfterAbsence() else { return nil }
        let now = DispatchTime.now().uptimeNanoseconds
        return state.withLock { $0.mayAskToRelease(now: now) ? $0.holdStart : nil }
    }

    /// Every peer (`peers` of them) cleared the hold that started at `start` (``CachetReturnHold/release(startedAt:now:)``):
    /// it ends now, unless another started since. A stall noticed now starts its own hold first, so answers
    /// read after a stop never end the hold that stop calls for.
    func release(startedAt start: UInt64, peers: Int) {
        let now = DispatchTime.now().uptimeNanoseconds
        if now &- lastTick.load(ordering: .relaxed) > stallThreshold { tick() }
        let released = state.withLock { hold -> Bool in
            guard hold.release(startedAt: start, now: now) else { return false }
            holdUntil.store(hold.holdUntil, ordering: .relaxed)
            return true
        }
        guard released else { return }
        releases.wrappingAdd(1, ordering: .relaxed)
        logger?.notice(
            "this node serves its own keys again: every peer routes them here and owes it nothing",
            metadata: ["hold.seconds": "\(Double(now &- start) / 1e9)", "cluster.peers_cleared": "\(peers)"]
        )
    }

    /// A peer answered after every peer had failed.
    func regainedContact() {
        let now = DispatchTime.now().uptimeNanoseconds
        absences.wrappingAdd(1, ordering: .releasing)
        let (wasHolding, until) = state.withLock { hold in
            let wasHolding = hold.isHolding(now: now)
            hold.regainedContact(now: now)
            holdUntil.store(hold.holdUntil, ordering: .relaxed)
            return (wasHolding, hold.holdUntil)
        }
        if !wasHolding {
            logHold("contact with the cluster is back (it may have been cut off)", now: now, until: until)
        }
    }

    /// One line when a hold starts: why, and for how long at least.
    private func logHold(_ reason: String, now: UInt64, until: UInt64) {
        logger?.notice(
            "this node holds its own keys (GETs miss, writes go to their stand-ins) while stand-ins may tell it what they wrote",
            metadata: [
                "hold.reason": "\(reason)",
                "hold.seconds": "\(Double(until &- now) / 1e9)",
            ]
        )
    }

    /// Records whether the node reaches fewer than a majority of the members now (``NodeHealth``, when a
    /// peer's state changes, under its lock so that the last word is the latest). Leaving the minority
    /// starts a hold (as regained contact does) before the flag is cleared, so that no request sees neither.
    /// Nothing changes with the rule off.
    /// - Parameters:
    ///   - value: whether the node is in the minority.
    ///   - reached: the members it reaches, itself counted.
    ///   - members: the members of the cluster.
    func setInMinority(_ value: Bool, reached: Int, members: Int) {
        guard holdsInMinority else { return }
        if value {
            reach.withLock { $0 = (reached: reached, members: members) }
            minority.store(true, ordering: .releasing)
        } else if minority.load(ordering: .relaxed) {
            regainedContact()
            minority.store(false, ordering: .releasing)
        }
    }

    /// Why a write is refused while this node is in the minority, for the reply.
    /// - Parameter ownKey: whether the key is this node's own (else it would serve it for another member).
    func minorityRefusal(ownKey: Bool) -> String {
        let reach = reach.withLock { $0 }
        let why =
            ownKey
            ? "so it does not take writes of its own keys (it may be cut off while another member stands in for it)"
            : "so it does not serve other members' keys in their place (the members it does not reach may have "
                + "given them to another member)"
        return "this node reaches \(reach.reached) of the cluster's \(reach.members) members, fewer than a majority, "
            + why + "; send the request through another member, or retry once it reaches a majority again"
    }

    /// Records whether every peer has failed now (``NodeHealth``, after each outcome, under its lock so that
    /// the last word is the latest).
    func setCutOff(_ value: Bool) {
        cutOff.store(value, ordering: .relaxed)
    }

    /// A request from a peer (`forwarded` set) for a key this node owns arrived: when every peer has failed
    /// in this node's view, contact is back from the other side (a partition healed, and the peer saw this
    /// node before this node's probes were answered), so the hold starts before the request is served.
    func peerRequestArrived() {
        if cutOff.load(ordering: .relaxed) { regainedContact() }
    }

    /// Records a tick; returns whether the node holds now.
    @discardableResult
    private func tick() -> Bool {
        let now = DispatchTime.now().uptimeNanoseconds
        let (holding, stalled, until) = state.withLock { hold in
            let stalled = hold.tick(now: now)
            // Counted before the hold is published, so that a request that sees the hold sees the absence.
            if stalled { absences.wrappingAdd(1, ordering: .releasing) }
            holdUntil.store(hold.holdUntil, ordering: .relaxed)
            lastTick.store(now, ordering: .relaxed)
            return (hold.isHolding(now: now), stalled, hold.holdUntil)
        }
        if stalled {
            logHold("the process did not run for a while (stopped, or the machine froze)", now: now, until: until)
        }
        return holding
    }
}
