import Dispatch

/// Timers: a binary heap of deadlines on the loop's queue, with one `DispatchSourceTimer` set to the
/// earliest; a lingering handler waits no longer than it (see `drain()`).
extension CachetEventLoop {

    /// Runs `work` on the loop's queue once `delay` has passed, unless cancelled first. Called on `queue`.
    /// - Parameters:
    ///   - delay: how long from now.
    ///   - work: what to run.
    /// - Returns: the timer's identity, for ``cancelTimer(_:)``.
    @discardableResult
    public func schedule(after delay: Duration, _ work: @escaping () -> Void) -> CachetTimerID {
        schedule(at: CachetDeadline(after: delay), work)
    }

    /// Runs `work` on the loop's queue once `deadline` has passed, unless cancelled first. Called on `queue`.
    /// - Parameters:
    ///   - deadline: when.
    ///   - work: what to run.
    /// - Returns: the timer's identity, for ``cancelTimer(_:)``.
    @discardableResult
    public func schedule(at deadline: CachetDeadline, _ work: @escaping () -> Void) -> CachetTimerID {
        preconditionInEventLoop()
        let id = nextTimerID
        nextTimerID &+= 1
        guard !stopped else { return CachetTimerID(value: id) }
        timerWork[id] = work
        heapPush((deadline.uptimeNanoseconds, id))
        armTimerSource()
        return CachetTimerID(value: id)
    }

    /// Cancels a timer that has not run; does nothing otherwise. Called on `queue`.
    /// - Parameter timer: what ``schedule(after:_:)`` returned.
    public func cancelTimer(_ timer: CachetTimerID) {
        preconditionInEventLoop()
        timerWork[timer.value] = nil
        // Cancelled entries stay in the heap and are skipped when due; drop them while they lead it.
        while let first = timerHeap.first, timerWork[first.id] == nil { _ = heapPop() }
        if timerHeap.isEmpty { timerWork.removeAll(keepingCapacity: true) }
    }

    /// The number of timers scheduled and not yet run or cancelled. Read on `queue`.
    public var timerCount: Int { timerWork.count }

    /// Runs the timers that are due; called after every batch of events, so the common case (no timer at
    /// all) is an inline check.
    @inline(__always)
    func runDueTimers() {
        if !timerHeap.isEmpty { runDueTimersNow() }
    }

    private func runDueTimersNow() {
        let now = CachetDeadline.now()
        while let first = timerHeap.first, first.deadline <= now {
            _ = heapPop()
            if let work = timerWork.removeValue(forKey: first.id) { work() }
            if stopped { return }
        }
        armTimerSource()
    }

    /// Points the timer source at the earliest deadline; not while the handler lingers through timers (it
    /// runs them itself, and it arms the source when it returns): each change of a Dispatch timer wakes
    /// Dispatch's manager thread, and a paced load changes it once per request.
    func armTimerSource() {
        guard !isLingeringThroughTimers, let next = timerHeap.first?.deadline else { return }
        if timerSource == nil {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.setEventHandler { [unowned self] in
                timerSourceDeadline = .max
                runDueTimers()
            }
            timer.activate()
            timerSource = timer
        }
        guard next != timerSourceDeadline else { return }
        timerSourceDeadline = next
        let now = CachetDeadline.now()
        let delay = next > now ? next - now : 0
        timerSource?.schedule(
            deadline: .now() + .nanoseconds(Int(clamping: delay)),
            repeating: .never,
            leeway: timerLeeway
        )
    }

    private func heapPush(_ entry: (deadline: UInt64, id: UInt64)) {
        timerHeap.append(entry)
        var child = timerHeap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard timerHeap[child].deadline < timerHeap[parent].deadline else { break }
            timerHeap.swapAt(child, parent)
            child = parent
        }
    }

    private func heapPop() -> (deadline: UInt64, id: UInt64)? {
        guard !timerHeap.isEmpty else { return nil }
        let first = timerHeap[0]
        let last = timerHeap.removeLast()
        if !timerHeap.isEmpty {
            timerHeap[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var smallest = parent
                if left < timerHeap.count && timerHeap[left].deadline < timerHeap[smallest].deadline { smallest = left }
                if right < timerHeap.count && timerHeap[right].deadline < timerHeap[smallest].deadline {
                    smallest = right
                }
                if smallest == parent { break }
                timerHeap.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return first
    }
}
