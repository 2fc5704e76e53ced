import CachetIO
import CachetLocking
import CachetWire
import Synchronization

/// The node's stream of changes for WATCH (`Protocol/PROTOCOL.md`, "WATCH"): the recent changes of
/// watched keys in a ring bounded by bytes, each with a sequence number of this run of the node, and the
/// watchers, each fed from the ring on its own loop up to its own send limit.
///
/// - Writes pay one atomic load while nothing is watched. Once something is, a change is matched against
///   the watched prefixes by hashing the key's first bytes once per prefix length in use (not once per
///   watcher), and recorded only when some prefix matches.
/// - A prefix stays registered for `retain` seconds after its last watcher leaves (forgotten at the next
///   WATCH, UNWATCH or 1,024th write after that), so that a watcher that reconnects resumes where it
///   stopped; a resume the ring or the registration cannot serve gets a GAP.
/// - A watcher that does not read has at most its send limit queued; the ring moves on without it, and
///   when it reads again it is sent a GAP and skipped forward. Writers and other watchers never wait for it.
///
/// Thread-safe: the ring and the registry behind one lock, taken by writes of watched keys and by the
/// watchers' loops.
final class NodeWatchHub: Sendable {
    /// This run of the node: random, never 0.
    let run: UInt64
    /// The ring's bound in bytes (keys, values and a fixed overhead per change).
    let ringLimit: Int
    /// Values longer than this are not kept in the ring (their events say the value was left out).
    let valueLimit: Int
    /// How long a prefix stays registered after its last watcher leaves, in nanoseconds.
    let retain: UInt64
    /// The most a watcher has queued for sending before it waits for its peer to read.
    let sendLimit: Int

    /// Prefixes registered (watched now, or retained): 0 lets writes skip everything.
    private let registered = Atomic<Int>(0)
    private let state = CachetLock(State())

    /// One recorded change.
    struct Change {
        var kind: CachetEventKind
        var ttl: UInt32
        var key: [UInt8]
        var value: [UInt8]?
        var valueOmitted: Bool

        var size: Int { 64 + key.count + (value?.count ?? 0) }
    }

    struct Prefix {
        var watchers: [WatchStream] = []
        /// The first sequence number recorded for it: a resume from before cannot be served.
        var since: UInt64
        /// When it stops being recorded, once no watcher is left (nanoseconds, monotonic).
        var retainedUntil: UInt64?
    }

    struct State {
        var ring: [Change] = []
        var head = 0
        /// The sequence number of `ring[head]`.
        var firstSequence: UInt64 = 1
        var nextSequence: UInt64 = 1
        var bytes = 0
        var prefixes: [[UInt8]: Prefix] = [:]
        /// The registered prefixes, for matching.
        var index = WatchPrefixIndex(prefixes: [], version: 0)
        /// Changes matched since retained prefixes were last looked at.
        var matchedSinceSweep = 0

        func change(_ sequence: UInt64) -> Change { ring[head + Int(sequence - firstSequence)] }

        mutating func rebuildIndex() { index = WatchPrefixIndex(prefixes: prefixes.keys, version: index.version + 1) }

        /// The registered prefixes `key` starts with.
        func matches(_ key: UnsafeRawBufferPointer, into found: inout [[UInt8]]) { index.matches(key, into: &found) }
    }

    /// - Parameters:
    ///   - ringLimit: bytes of changes kept for watchers that resume or fall behind.
    ///   - retain: seconds a prefix stays registered after its last watcher leaves.
    ///   - sendLimit: bytes a watcher may have queued for sending.
    init(ringLimit: Int, retain: Double, sendLimit: Int) {
        var run: UInt64 = 0
        while run == 0 { run = UInt64.random(in: .min ... .max) }
        self.run = run
        self.ringLimit = ringLimit
        self.valueLimit = max(0, min(64 << 10, ringLimit / 16))
        self.retain = UInt64(retain * 1e9)
        self.sendLimit = sendLimit
    }

    /// FNV-1a of a prefix's bytes.
    @inline(__always)
    static func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325 ^ UInt64(bytes.count)
        for byte in bytes {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return hash
    }

    /// Forgets the prefixes whose retention has passed; returns the new index when it changed.
    @discardableResult
    private static func sweep(_ state: inout State, registered: borrowing Atomic<Int>) -> WatchPrefixIndex? {
        let now = CachetDeadline.now()
        let expired = state.prefixes.filter { $0.value.retainedUntil.map { $0 <= now } ?? false }.keys
        guard !expired.isEmpty else { return nil }
        for prefix in expired { state.prefixes.removeValue(forKey: prefix) }
        registered.store(state.prefixes.count, ordering: .releasing)
        state.rebuildIndex()
        return state.index
    }

    // MARK: The loops' views

    /// The loops' copies of the prefix index, and how to reach each loop.
    private let views = CachetLock<
        [(view: WatchIndexView, execute: @Sendable (@escaping @Sendable () -> Void) -> Void)]
    >([])

    /// Gives a loop its copy of the index, kept up to date on that loop (``WatchIndexView``).
    /// - Parameters:
    ///   - view: the loop's view, read only on the loop.
    ///   - execute: runs a block on the loop.
    func attach(_ view: WatchIndexView, execute: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        views.withLock { $0.append((view, execute)) }
        let index = state.withLock { $0.index }
        execute { view.install(index) }
    }

    /// Hands every loop a new index; `done` runs once every loop has it.
    private func spread(_ index: WatchPrefixIndex, done: (@Sendable () -> Void)? = nil) {
        let targets = views.withLock { $0 }
        guard !targets.isEmpty else {
            done?()
            return
        }
        let left = CachetLock(targets.count)
        for (view, execute) in targets {
            execute {
                view.install(index)
                if left.withLock({
                    $0 -= 1; return $0
                }) == 0 {
                    done?()
                }
            }
        }
    }

    // MARK: Writes

    /// A change of `key` (a PUT, DEL, expiry or eviction): recorded, and its watchers woken, when a
    /// registered prefix matches.
    @inline(__always)
    func publish(
        _ kind: CachetEventKind,
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer? = nil,
        ttl: UInt32 = 0
    ) {
        guard registered.load(ordering: .acquiring) > 0 else { return }
        record(kind, key: key, value: value, ttl: ttl)
    }

    /// ``publish(_:key:value:ttl:)`` from a loop, through its view: a write that no prefix can match takes
    /// no lock.
    @inline(__always)
    func publish(
        _ kind: CachetEventKind,
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer? = nil,
        ttl: UInt32 = 0,
        omittingValue: Bool = false,
        view: WatchIndexView
    ) {
        guard let index = view.index, index.mayMatch(key) else { return }
        record(kind, key: key, value: value, ttl: ttl, omittingValue: omittingValue)
    }

    /// Whether anything is watched (or retained) now: a disk tier reads an entry's key only then.
    var isWatched: Bool { registered.load(ordering: .acquiring) > 0 }

    /// A CLEAR of the keys under `prefix` (every key when it is empty): every watcher whose prefix overlaps
    /// it is told.
    func publishClear(prefix: [UInt8]) {
        guard registered.load(ordering: .acquiring) > 0 else { return }
        var woken: [WatchStream] = []
        state.withLock { state in
            let overlapping = state.prefixes.filter { $0.key.starts(with: prefix) || prefix.starts(with: $0.key) }
            guard !overlapping.isEmpty else { return }
            append(Change(kind: .clear, ttl: 0, key: prefix, value: nil, valueOmitted: false), to: &state)
            for (_, entry) in overlapping { Self.wake(entry.watchers, into: &woken) }
        }
        for stream in woken { stream.wake() }
    }

    private func record(
        _ kind: CachetEventKind,
        key: UnsafeRawBufferPointer,
        value: UnsafeRawBufferPointer?,
        ttl: UInt32,
        omittingValue: Bool = false
    ) {
        var woken: [WatchStream] = []
        var swept: WatchPrefixIndex?
        defer { if let swept { spread(swept) } }
        state.withLock { state in
            // A prefix whose retention has passed stops being recorded (looked at every 1,024 changes, and
            // at each WATCH and UNWATCH).
            state.matchedSinceSweep += 1
            if state.matchedSinceSweep >= 1024 {
                state.matchedSinceSweep = 0
                swept = Self.sweep(&state, registered: registered)
            }
            var found: [[UInt8]] = []
            state.matches(key, into: &found)
            guard !found.isEmpty else { return }
            let kept = value.flatMap { $0.count <= valueLimit ? Array($0) : nil }
            append(
                Change(
                    kind: kind,
                    ttl: ttl,
                    key: Array(key),
                    value: kept,
                    valueOmitted: omittingValue || (value != nil && kept == nil)
                ),
                to: &state
            )
            for prefix in found { Self.wake(state.prefixes[prefix]?.watchers ?? [], into: &woken) }
        }
        for stream in woken { stream.wake() }
    }

    private func append(_ change: Change, to state: inout State) {
        state.ring.append(change)
        state.bytes += change.size
        state.nextSequence += 1
        while state.bytes > ringLimit && state.head < state.ring.count - 1 {
            state.bytes -= state.ring[state.head].size
            state.head += 1
            state.firstSequence += 1
        }
        if state.head > 1024 && state.head * 2 > state.ring.count {
            state.ring.removeFirst(state.head)
            state.head = 0
        }
    }

    /// Marks the watchers not already woken; the caller wakes them once the lock is released.
    private static func wake(_ watchers: [WatchStream], into woken: inout [WatchStream]) {
        for stream in watchers where !stream.scheduled {
            stream.scheduled = true
            woken.append(stream)
        }
    }

    // MARK: Watchers

    /// Registers a watcher; returns the position its stream starts after, and whether a GAP must come
    /// first (a resume the ring or the prefix's registration cannot serve, or one from another run).
    func register(
        _ stream: WatchStream,
        ready: @escaping @Sendable (_ position: CachetWatchPosition, _ gap: Bool) -> Void
    ) {
        let (position, gap, index) = state.withLock { state -> (CachetWatchPosition, Bool, WatchPrefixIndex?) in
            var index = Self.sweep(&state, registered: registered)
            let prefix = stream.request.prefix
            var entry = state.prefixes[prefix] ?? Prefix(since: state.nextSequence)
            entry.watchers.append(stream)
            entry.retainedUntil = nil
            let isNew = state.prefixes[prefix] == nil
            state.prefixes[prefix] = entry
            if isNew {
                registered.store(state.prefixes.count, ordering: .releasing)
                state.rebuildIndex()
                index = state.index
            }
            let current = state.nextSequence - 1
            guard let from = stream.request.resumingAfter else {
                stream.nextSequence = state.nextSequence
                return (CachetWatchPosition(run: run, sequence: current), false, index)
            }
            if from.run == run, from.sequence <= current, from.sequence + 1 >= max(entry.since, state.firstSequence) {
                stream.nextSequence = from.sequence + 1
                return (from, false, index)
            }
            stream.nextSequence = state.nextSequence
            return (CachetWatchPosition(run: run, sequence: current), true, index)
        }
        // The reply waits until every loop matches writes against the new prefix: a write acknowledged
        // after it is then never missed.
        guard let index else { return ready(position, gap) }
        spread(index) { ready(position, gap) }
    }

    /// A watcher leaves (UNWATCH, or its connection closed): its prefix is retained for resumes.
    func unregister(_ stream: WatchStream) {
        let index = state.withLock { state -> WatchPrefixIndex? in
            let prefix = stream.request.prefix
            guard var entry = state.prefixes[prefix] else { return nil }
            entry.watchers.removeAll { $0 === stream }
            if entry.watchers.isEmpty { entry.retainedUntil = CachetDeadline.now() &+ retain }
            state.prefixes[prefix] = entry
            return Self.sweep(&state, registered: registered)
        }
        if let index { spread(index) }
    }

    /// The watcher's next changes, up to about `budget` bytes of frames: whether it fell behind the ring
    /// (a GAP first), the changes matching its prefix with their sequence numbers, and whether more wait.
    func next(for stream: WatchStream, budget: Int) -> (gap: UInt64?, changes: [(UInt64, Change)], more: Bool) {
        state.withLock { state in
            stream.scheduled = false
            var gap: UInt64?
            if stream.nextSequence < state.firstSequence {
                gap = state.firstSequence - 1
                stream.nextSequence = state.firstSequence
            }
            var changes: [(UInt64, Change)] = []
            var bytes = 0
            let prefix = stream.request.prefix
            var sequence = stream.nextSequence
            while sequence < state.nextSequence && bytes < budget {
                let change = state.change(sequence)
                let matches =
                    change.kind == .clear
                    ? change.key.starts(with: prefix) || prefix.starts(with: change.key)
                    : change.key.starts(with: prefix)
                if matches {
                    changes.append((sequence, change))
                    bytes += change.size
                }
                sequence += 1
            }
            stream.nextSequence = sequence
            let more = sequence < state.nextSequence
            if more { stream.scheduled = true }
            return (gap, changes, more)
        }
    }

    /// Prefixes registered and changes kept (STATS).
    var figures: (watchers: Int, prefixes: Int, changes: Int, bytes: Int) {
        state.withLock { state in
            (
                state.prefixes.values.reduce(0) { $0 + $1.watchers.count }, state.prefixes.count,
                state.ring.count - state.head, state.bytes
            )
        }
    }
}
