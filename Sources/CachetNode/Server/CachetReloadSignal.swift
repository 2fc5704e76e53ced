import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// SIGHUP, caught through a Dispatch signal source: the operator's request to re-read the cluster file.
///
/// Install it before the node announces that it listens: SIGHUP's default action ends the process, so a
/// reload requested right after the announcement must already find the source in place.
///
/// `@unchecked Sendable`: the source is created in ``install(handler:)`` and only cancelled in
/// ``cancel()`` and `deinit`, both of which Dispatch makes safe to call from any thread.
public final class CachetReloadSignal: @unchecked Sendable {
    private let source: any DispatchSourceSignal

    private init(source: any DispatchSourceSignal) {
        self.source = source
    }

    /// Starts watching SIGHUP (its default action, ending the process, is turned off).
    /// - Parameter handler: called on a serial queue of its own for each SIGHUP (signals that arrive while
    ///   it runs are coalesced into one more call).
    /// - Returns: the watcher; SIGHUP is watched until it is cancelled or released.
    public static func install(handler: @escaping @Sendable () -> Void) -> CachetReloadSignal {
        let queue = DispatchQueue(label: "cachet.reload")
        // The default action goes first; Dispatch then takes the signal over for its source.
        signal(SIGHUP, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: queue)
        source.setEventHandler(handler: handler)
        source.activate()
        return CachetReloadSignal(source: source)
    }

    /// Stops calling the handler. SIGHUP stays ignored.
    public func cancel() {
        source.cancel()
    }

    deinit {
        source.cancel()
    }
}
