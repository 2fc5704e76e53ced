/// Replies waiting to be handed to their callers by a caller rather than by the event loop's thread.
///
/// Why: a caller's continuation resumed on the loop's thread enqueues its task on the global executor from
/// there, which on Linux takes a Dispatch continuation from the heap per reply: Dispatch caches them per
/// thread, and the loop's thread only takes (the workers that run the tasks free them into their own
/// caches). Resumed on a worker thread, the enqueue takes one from that worker's cache instead.
///
/// How (``ConnectionSlot``): when the loop has a reply for a caller, it resumes that caller itself only if
/// the relay is not armed, and arms it; while it is armed, it queues the reply here instead. Every caller,
/// once resumed, drains its slot's relay before it returns: it resumes the queued callers (at most
/// ``drainLimit``), and disarms the relay when it finds it empty. So of a batch of replies read together,
/// the loop resumes the first and its caller resumes the rest.
///
/// Why nothing waits forever: replies are queued only while the relay is armed; it is armed only when the
/// loop resumes a caller itself, and disarmed only by a drain that found it empty. So while anything is
/// queued, some caller resumed by the loop (or, when a drain stopped at its limit, the last caller it
/// resumed) has yet to drain, and will. Timeouts and cancellations do not look here: a queued reply has
/// left the slot's requests in flight, so its caller is answered, only a moment later. Should that caller
/// be slow to run (Swift's pool busy), the client's tick hands over what has waited since the previous
/// tick with no drain meanwhile (``takeStale()``), from the loop's thread as before the relay.
///
/// `Continuation` is the caller's continuation in the client, a plain value in tests. Not `Sendable`: kept
/// in the slot's locked state.
struct ResumeRelay<Continuation> {
    /// A reply for a caller.
    struct Entry {
        var continuation: Continuation
        var outcome: ClientOutcome
        var id: UInt32
    }

    /// Callers one drain resumes at most before it leaves the rest to the last of them.
    static var drainLimit: Int { 16 }

    /// Whether a caller resumed by the loop has yet to drain: replies are queued meanwhile.
    private(set) var isArmed = false
    /// Drains that took an entry, counted (wrapping): a tick that sees the same count as the previous one
    /// while entries wait knows they were not drained meanwhile.
    private var drains: UInt = 0
    /// `drains` as the previous tick saw it, or nil when nothing was queued then.
    private var drainsAtTick: UInt?
    private var storage: ContiguousArray<Entry?> = []
    private var head = 0
    private(set) var count = 0

    /// A reply for `continuation` has come: returns true when the loop must resume it itself (the relay
    /// was not armed, and now is), false when it was queued.
    mutating func deliver(_ continuation: Continuation, _ outcome: ClientOutcome, id: UInt32) -> Bool {
        guard isArmed else {
            isArmed = true
            return true
        }
        if count == storage.count { grow() }
        storage[(head + count) & (storage.count - 1)] = Entry(continuation: continuation, outcome: outcome, id: id)
        count += 1
        return false
    }

    /// The next queued reply, or nil, and the relay disarmed, when none is left.
    mutating func next() -> Entry? {
        guard count > 0 else {
            isArmed = false
            return nil
        }
        let entry = storage[head]
        storage[head] = nil
        head = (head + 1) & (storage.count - 1)
        count -= 1
        drains &+= 1
        return entry
    }

    /// The tick's check (on the loop): whether entries have waited since the previous tick without any
    /// drain; if so, the loop takes them all with ``next()``.
    mutating func takeStale() -> Bool {
        guard count > 0 else {
            drainsAtTick = nil
            return false
        }
        if let seen = drainsAtTick, seen == drains {
            drainsAtTick = nil
            return true
        }
        drainsAtTick = drains
        return false
    }

    private mutating func grow() {
        let capacity = max(16, storage.count * 2)
        var grown = ContiguousArray<Entry?>(repeating: nil, count: capacity)
        for offset in 0..<count {
            grown[offset] = storage[(head + offset) & (storage.count - 1)]
        }
        storage = grown
        head = 0
    }
}
