import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// SIGTERM and SIGINT, caught through Dispatch signal sources.
///
/// Install them before the node announces that it listens: a signal that arrives after the default
/// disposition is replaced but before a source watches it would otherwise be lost, and the node would
/// never stop.
///
/// `@unchecked Sendable`: the sources are created in ``install()`` and only cancelled in `deinit`; the
/// semaphore is thread-safe.
public final class CachetTerminationSignals: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]
    private let semaphore: DispatchSemaphore

    private init(sources: [any DispatchSourceSignal], semaphore: DispatchSemaphore) {
        self.sources = sources
        self.semaphore = semaphore
    }

    /// Starts watching SIGTERM and SIGINT (their default action, ending the process, is turned off).
    /// - Returns: the watcher; ``wait()`` returns once either signal has arrived.
    public static func install() -> CachetTerminationSignals {
        let queue = DispatchQueue(label: "cachet.signals")
        let semaphore = DispatchSemaphore(value: 0)
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT] {
            // The default action goes first; Dispatch then takes the signal over for its source.
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { semaphore.signal() }
            source.activate()
            sources.append(source)
        }
        return CachetTerminationSignals(sources: sources, semaphore: semaphore)
    }

    /// Blocks until SIGTERM or SIGINT arrives.
    public func wait() {
        semaphore.wait()
    }

    deinit {
        for source in sources { source.cancel() }
    }
}
