/// What a node that served another member's keys must tell that member before it is trusted with them
/// again: the keys it wrote or deleted for each owner, bounded, and each owner's phase. Pure: no I/O, no
/// clock. `Protocol/CLUSTER.md`, "Failover without stale reads", argues why this order never lets a GET
/// return a value older than one a stand-in accepted.
///
/// Owners are named by member id, so a log survives a reload that renumbers members.
///
/// Per owner: ``Phase/clean`` (nothing to tell) → ``Phase/standingIn`` (a write was recorded) →
/// ``Phase/delivering`` (the owner answered again; its invalidations are being sent) → ``Phase/clean``
/// once every one was acknowledged. While an owner is not clean, the node serves its keys itself, and a
/// GET of one of them returns the local value **only** when the key is in the log (written in this
/// episode); any other key of that owner is a miss, never an older local copy.
public struct CachetStandInLog: Sendable {
    /// Bounds per owner.
    public struct Limits: Sendable, Hashable {
        /// Keys remembered per owner before the log overflows. Default 65536.
        public var maximumKeys: Int
        /// Key bytes remembered per owner before the log overflows. Default 8 MiB.
        public var maximumBytes: Int

        /// Creates limits (at least 1 key and 1 byte).
        /// - Parameters:
        ///   - maximumKeys: keys per owner.
        ///   - maximumBytes: key bytes per owner.
        public init(maximumKeys: Int = 65536, maximumBytes: Int = 8 << 20) {
            self.maximumKeys = max(1, maximumKeys)
            self.maximumBytes = max(1, maximumBytes)
        }
    }

    /// An owner's phase.
    public enum Phase: Sendable, Hashable {
        /// Nothing to tell the owner: its keys go to it whenever it is routable.
        case clean
        /// This node served writes for the owner, which is (or was, in another node's view) unreachable.
        case standingIn
        /// The owner answers again; its invalidations are being delivered. Its keys are still served here.
        case delivering
    }

    /// An invalidation to send to an owner, as a forwarded request.
    public enum Invalidation: Sendable, Hashable {
        /// DEL of one key (NOT_FOUND from the owner counts as delivered).
        case delete(key: [UInt8])
        /// CLEAR of the owner's whole store: the log overflowed and lost track of keys.
        case clear
    }

    struct OwnerLog: Sendable {
        var phase: Phase = .clean
        /// The keys written in this episode, served locally while not clean.
        var keys: Set<[UInt8]> = []
        /// When each key was last written here (a count of the owner's writes), so that its invalidations go
        /// out in the order the writes were acknowledged.
        var lastWrite: [[UInt8]: UInt64] = [:]
        var writes: UInt64 = 0
        var bytes = 0
        /// The log lost track of a key: the owner must drop everything.
        var overflowed = false
        /// Invalidations handed out and not yet acknowledged (delivering only).
        var outstanding: Set<Invalidation> = []
        /// Keys restored from an earlier run (``restore(owner:keys:overflowed:)``), or written before another
        /// member came back (``memberReturned()``), and not written since: delivered, but never served here
        /// (another stand-in may have taken a newer value meanwhile).
        var restored: Set<[UInt8]> = []
    }

    /// What recording a write adds to an owner's log (``addition(forWrite:owner:)``): what a node that
    /// keeps its log in a file must write there before it records the write and answers it.
    public enum Addition: Sendable, Hashable {
        /// The key is remembered for the owner.
        case key
        /// The owner's log overflows: it no longer knows every key, and the owner will get a CLEAR.
        case overflow
    }

    /// The bounds.
    public let limits: Limits
    var owners: [String: OwnerLog] = [:]

    /// Creates an empty log: every owner clean.
    /// - Parameter limits: bounds per owner.
    public init(limits: Limits = Limits()) { self.limits = limits }

    /// The owner's phase.
    /// - Parameter owner: the owner's id.
    /// - Returns: its phase; `clean` for an owner never recorded.
    /// - Complexity: O(1) on average.
    public func phase(of owner: String) -> Phase { owners[owner]?.phase ?? .clean }

    /// Owners that are not clean.
    public var ownersNotClean: [String] { owners.keys.sorted() }

    /// The keys of `owner` whose local value is the latest this node accepted in this episode (written in
    /// this run, and not before another member came back): those it may hand back to the owner with their
    /// values (`Protocol/CLUSTER.md`, "Handing back values").
    /// - Parameter owner: the owner's id.
    /// - Complexity: O(m) in the owner's keys.
    public func servableKeys(for owner: String) -> Set<[UInt8]> {
        guard let log = owners[owner] else { return [] }
        return log.restored.isEmpty ? log.keys : log.keys.subtracting(log.restored)
    }

    /// Whether a GET of `key`, owned by `owner`, may be answered from the local store: only while the
    /// owner is not clean and the key was written in this episode, by this run of the node (a key only
    /// restored from an earlier run is not served). Otherwise a node that does not own the
    /// key answers a miss.
    /// - Parameters:
    ///   - key: the key.
    ///   - owner: its owner's id.
    /// - Returns: whether the local value may be returned.
    /// - Complexity: O(k) for a key of k bytes.
    public func mayServeLocally(_ key: [UInt8], owner: String) -> Bool {
        guard let log = owners[owner] else { return false }
        return log.keys.contains(key) && (log.restored.isEmpty || !log.restored.contains(key))
    }

    /// What ``recordWrite(_:owner:ownerRoutable:)`` of `key` would add to `owner`'s log: nothing when the
    /// key is already remembered or the log has already overflowed. No change.
    /// - Parameters:
    ///   - key: the key written or deleted.
    ///   - owner: its owner's id.
    /// - Returns: the addition, or nil when the log would not change (apart from the phase).
    /// - Complexity: O(k) on average for a key of k bytes.
    public func addition(forWrite key: [UInt8], owner: String) -> Addition? {
        guard let log = owners[owner] else {
            return key.count > limits.maximumBytes ? .overflow : .key
        }
        if log.overflowed || log.keys.contains(key) { return nil }
        return log.keys.count >= limits.maximumKeys || log.bytes + key.count > limits.maximumBytes ? .overflow : .key
    }

    /// Restores what an earlier run of this node recorded for `owner` and had not delivered (read back
    /// from the file the node keeps its log in). The owner starts ``Phase/standingIn`` (when it was clean),
    /// so that its invalidations are handed out on its next return. The keys are delivered but **not**
    /// served here until written again: while this node was away another member may have stood in and
    /// taken a newer value. Keys beyond the limits overflow the log. Nothing happens for no keys and no
    /// overflow.
    /// - Parameters:
    ///   - owner: the owner's id.
    ///   - keys: the keys recorded for it.
    ///   - overflowed: whether its log had overflowed (the owner must get a CLEAR).
    /// - Complexity: O(m) in the keys restored.
    public mutating func restore(owner: String, keys: some Sequence<[UInt8]>, overflowed: Bool) {
        var log = owners[owner] ?? OwnerLog()
        var changed = overflowed && !log.overflowed
        if overflowed { log.overflowed = true }
        for key in keys where !log.keys.contains(key) {
            changed = true
            if log.overflowed || log.keys.count >= limits.maximumKeys || log.bytes + key.count > limits.maximumBytes {
                log.overflowed = true
            } else {
                log.keys.insert(key)
                log.bytes += key.count
                log.restored.insert(key)
                log.writes += 1
                log.lastWrite[key] = log.writes
            }
        }
        guard changed else { return }
        if log.phase == .clean { log.phase = .standingIn }
        owners[owner] = log
    }

    /// What is recorded for `owner` (what a file holding the log must keep for it).
    /// - Parameter owner: the owner's id.
    /// - Returns: the keys remembered, and whether the log overflowed; none for a clean owner.
    /// - Complexity: O(m) in the keys recorded.
    public func recorded(for owner: String) -> (keys: [[UInt8]], overflowed: Bool) {
        guard let log = owners[owner] else { return ([], false) }
        return (Array(log.keys), log.overflowed)
    }

    /// Records a PUT or DEL of `key` served here for `owner` (as its stand-in, or because a forwarded
    /// request for it arrived). Call it before answering the write.
    /// - Parameters:
    ///   - key: the key written or deleted.
    ///   - owner: its owner's id.
    ///   - ownerRoutable: whether this node sees the owner as routable: then the episode goes straight to
    ///     ``Phase/delivering`` and the key's DEL is due now.
    ///   - servable: whether this node takes the write as the key's stand-in in its own view, so that its
    ///     local value may be served later. False for a write a peer sent it while it does not stand in
    ///     (another node's view): the key is recorded and delivered, but not served here until written
    ///     here again as its stand-in (the writes after it may go to the node this one takes for the
    ///     stand-in).
    ///   - remember: false when the node cannot record another key (its file is full): a new key then
    ///     overflows the owner's log, as past the limits.
    /// - Returns: invalidations to send now (only when delivering).
    /// - Complexity: O(k) on average for a key of k bytes.
    public mutating func recordWrite(
        _ key: [UInt8],
        owner: String,
        ownerRoutable: Bool,
        servable: Bool = true,
        remember: Bool = true
    ) -> [Invalidation] {
        var log = owners[owner] ?? OwnerLog()
        defer { owners[owner] = log }
        if log.phase == .clean { log.phase = .standingIn }
        // Written in this run as the stand-in: its local value is the latest this node accepted, and may be
        // served.
        if servable {
            if !log.restored.isEmpty { log.restored.remove(key) }
        } else {
            log.restored.insert(key)
        }
        let isNew = !log.keys.contains(key)
        if isNew {
            if !remember || log.overflowed || log.keys.count >= limits.maximumKeys
                || log.bytes + key.count > limits.maximumBytes
            {
                // Not remembered: its local value will not be served, and the owner must drop everything.
                log.overflowed = true
            } else {
                log.keys.insert(key)
                log.bytes += key.count
            }
        }
        if log.keys.contains(key) {
            log.writes += 1
            log.lastWrite[key] = log.writes
        }
        guard log.phase == .delivering || ownerRoutable else { return [] }
        if log.phase == .standingIn {
            log.phase = .delivering
            return Self.handOut(&log)
        }
        // Already delivering. Writes served here never reach the owner's store, so the owner only has to
        // lose the copies it held before the episode: a DEL or CLEAR already handed out covers them.
        if log.overflowed {
            if log.outstanding.contains(.clear) { return [] }
            log.outstanding.insert(.clear)
            return [.clear]
        }
        guard log.keys.contains(key), !log.outstanding.contains(.delete(key: key)) else { return [] }
        log.outstanding.insert(.delete(key: key))
        return [.delete(key: key)]
    }

    /// The owner answers again (it came up in this node's view): its invalidations, to send as forwarded
    /// requests before any of its keys goes back to it. Nothing when the owner is clean.
    /// - Parameter owner: the owner's id.
    /// - Returns: one DEL per key written, or one CLEAR if the log overflowed.
    /// - Complexity: O(m) in the keys recorded.
    public mutating func ownerReturned(_ owner: String) -> [Invalidation] {
        guard var log = owners[owner], log.phase == .standingIn else { return [] }
        defer { owners[owner] = log }
        log.phase = .delivering
        return Self.handOut(&log)
    }

    /// Another member came back (in this node's view): for some keys it now stands in where this node did,
    /// and may take writes of them that this node never sees. So no key this node wrote while it stood in
    /// is served from its local copy again until it is written here again; every one is still delivered to
    /// its owner. Without this, a second stand-in would serve its older copy once the member that took
    /// over from it went away again.
    /// - Complexity: O(m) in the keys recorded.
    public mutating func memberReturned() {
        for owner in owners.keys {
            owners[owner]!.restored.formUnion(owners[owner]!.keys)
        }
    }

    /// The owner became unreachable again while delivering: back to standing in; what was not
    /// acknowledged is handed out again on its next return.
    /// - Parameter owner: the owner's id.
    /// - Complexity: O(1).
    public mutating func ownerWentDown(_ owner: String) {
        guard var log = owners[owner], log.phase == .delivering else { return }
        log.phase = .standingIn
        log.outstanding = []
        owners[owner] = log
    }

    /// An invalidation was acknowledged by the owner (OK, or NOT_FOUND for a DEL). When it was the last,
    /// the owner is clean and its keys go back to it.
    /// - Parameters:
    ///   - invalidation: what was delivered.
    ///   - owner: the owner's id.
    /// - Returns: whether the owner is now clean, and then the keys whose local copies the node may
    ///   delete (they are never served again either way).
    /// - Complexity: O(k) on average.
    public mutating func delivered(_ invalidation: Invalidation, owner: String) -> (clean: Bool, dropLocally: [[UInt8]])
    {
        guard var log = owners[owner], log.phase == .delivering,
            log.outstanding.remove(invalidation) != nil
        else { return (false, []) }
        if case .clear = invalidation {
            // A CLEAR removed every copy the owner held, those of later writes' DELs included.
            log.outstanding = []
        }
        guard log.outstanding.isEmpty else {
            owners[owner] = log
            return (false, [])
        }
        owners[owner] = nil
        return (true, Array(log.keys))
    }

    /// The owner took a write of `key` itself, after this node had dropped its copy of the key (the owner
    /// holds after an absence and confirmed the write here first: `Protocol/CLUSTER.md`, "The owner's
    /// hold"): that write is newer than any this node recorded for the key, so the owner is owed no word on
    /// it any more. Forgotten, unless the log overflowed (its CLEAR still goes); the owner is clean when it was
    /// the last word owed. A write recorded here later records the key again.
    /// - Parameters:
    ///   - key: the key.
    ///   - owner: the owner's id.
    /// - Returns: whether the owner is now clean.
    /// - Complexity: O(k) on average for a key of k bytes.
    public mutating func ownerTookWrite(_ key: [UInt8], owner: String) -> Bool {
        guard var log = owners[owner], !log.overflowed, log.keys.remove(key) != nil else { return false }
        log.bytes -= key.count
        log.lastWrite[key] = nil
        log.restored.remove(key)
        log.outstanding.remove(.delete(key: key))
        if log.keys.isEmpty {
            owners[owner] = nil
            return true
        }
        owners[owner] = log
        return false
    }

    /// The invalidations an owner still waits for, in the order the writes they stand for were acknowledged
    /// here (a CLEAR first): the order they are sent in.
    /// - Parameter owner: the owner's id.
    /// - Complexity: O(m log m) in the outstanding invalidations.
    public func outstandingInOrder(for owner: String) -> [Invalidation] {
        guard let log = owners[owner] else { return [] }
        func rank(_ invalidation: Invalidation) -> UInt64 {
            guard case .delete(let key) = invalidation else { return 0 }
            return log.lastWrite[key] ?? 0
        }
        return log.outstanding.sorted { rank($0) < rank($1) }
    }

    /// The invalidations an owner still waits for (handed out, not acknowledged).
    /// - Parameter owner: the owner's id.
    /// - Returns: the outstanding invalidations.
    public func outstanding(for owner: String) -> Set<Invalidation> { owners[owner]?.outstanding ?? [] }

    private static func handOut(_ log: inout OwnerLog) -> [Invalidation] {
        if log.overflowed {
            log.outstanding = [.clear]
            return [.clear]
        }
        // In the order the writes were acknowledged here (the last write of each key counts).
        let deletes = log.keys.sorted { (log.lastWrite[$0] ?? 0) < (log.lastWrite[$1] ?? 0) }
            .map { Invalidation.delete(key: $0) }
        log.outstanding = Set(deletes)
        return deletes
    }
}
