import CachetLocking
public import Foundation

/// Measures how long the task pool takes to start a trivial task, from a thread outside the pool.
///
/// Every `interval` its thread enqueues an empty detached task and waits until the task runs; the wait
/// is how long a task that became ready then (a client request's continuation, say) would have waited
/// for a pool thread. A pool whose threads are all held by blocking tests shows up as probes that wait
/// seconds. Used by the client tests to allow for stalls they cannot help, and to measure a whole run
/// (`CACHET_POOL_WATCHDOG`, see `TestPoolTests`).
public final class PoolStallMonitor: Sendable {
    /// A probe that waited longer than the monitor's threshold.
    public struct Stall: Sendable, CustomStringConvertible {
        /// When the probe was enqueued.
        public var start: Date
        /// How long it waited for a pool thread.
        public var duration: Duration

        /// The start (seconds since the epoch, for matching against test event streams) and the duration.
        public var description: String {
            String(format: "%.3f +%.3f s", start.timeIntervalSince1970, duration.seconds)
        }
    }

    /// What a monitor saw.
    public struct Report: Sendable, CustomStringConvertible {
        /// How long it watched.
        public var watched: Duration
        /// Probes that ran (the one still waiting when the monitor stopped included).
        public var probes: Int
        /// The longest wait of one probe.
        public var worst: Duration
        /// Every probe's wait beyond `slack`, added up: how long the pool was unavailable.
        public var total: Duration
        /// The probes that waited longer than the threshold, oldest first.
        public var stalls: [Stall]

        /// A one-line summary.
        public var description: String {
            String(
                format: "watched %.1f s, %d probes, worst %.3f s, unavailable %.3f s in all, %d stalls",
                watched.seconds,
                probes,
                worst.seconds,
                total.seconds,
                stalls.count
            )
        }
    }

    private struct State {
        var running = true
        var probes = 0
        var worst: Duration = .zero
        var total: Duration = .zero
        var stalls: [Stall] = []
        /// The probe waiting for a thread now: when it was enqueued.
        var waitingSince: (ContinuousClock.Instant, Date)?
    }

    private let state = CachetLock(State())
    private let interval: Duration
    private let slack: Duration
    private let threshold: Duration
    private let started = ContinuousClock.now

    /// Creates a monitor; ``start()`` begins the probes.
    /// - Parameters:
    ///   - interval: the pause between one probe's run and the next probe.
    ///   - slack: how much of each probe's wait counts as ordinary (not added to ``Report/total``).
    ///   - threshold: waits longer than this are listed in ``Report/stalls``.
    public init(
        interval: Duration = .milliseconds(10),
        slack: Duration = .milliseconds(1),
        threshold: Duration = .milliseconds(100)
    ) {
        self.interval = interval
        self.slack = slack
        self.threshold = threshold
    }

    /// Starts probing on a thread of its own, until ``stop()``.
    public func start() {
        Thread.detachNewThread { self.probe() }
    }

    private func probe() {
        while state.withLock({ $0.running }) {
            let ran = DispatchSemaphore(value: 0)
            let enqueued = ContinuousClock.now
            state.withLock { $0.waitingSince = (enqueued, Date()) }
            Task.detached { ran.signal() }
            ran.wait()
            let waited = ContinuousClock.now - enqueued
            state.withLock { state in
                guard state.running, let (_, date) = state.waitingSince else { return }
                state.waitingSince = nil
                record(waited, since: date, in: &state)
            }
            Thread.sleep(forTimeInterval: interval.seconds)
        }
    }

    private func record(_ waited: Duration, since date: Date, in state: inout State) {
        state.probes += 1
        state.worst = max(state.worst, waited)
        state.total += max(.zero, waited - slack)
        if waited > threshold { state.stalls.append(Stall(start: date, duration: waited)) }
    }

    /// Stops probing and reports. A probe still waiting counts with its wait so far: a pool that is
    /// blocked right now is part of the answer.
    /// - Returns: what the monitor saw.
    public func stop() -> Report {
        let now = ContinuousClock.now
        return state.withLock { state in
            if state.running, let (enqueued, date) = state.waitingSince {
                record(now - enqueued, since: date, in: &state)
                state.waitingSince = nil
            }
            state.running = false
            return Report(
                watched: now - started,
                probes: state.probes,
                worst: state.worst,
                total: state.total,
                stalls: state.stalls
            )
        }
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    fileprivate var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
