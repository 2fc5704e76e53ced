import CachetWire

/// One watching connection's subscription: what it asked for, and how far it has been sent. `request`
/// and the connection are the loop's; `nextSequence` and `scheduled` are kept under the hub's lock.
final class WatchStream: @unchecked Sendable {
    let request: CachetWatchRequest
    /// The WATCH's request id, echoed by every EVENT.
    let id: UInt32
    /// Wakes the watcher on its loop.
    private let onWake: @Sendable () -> Void
    /// The next sequence number to look at (under the hub's lock).
    var nextSequence: UInt64 = 0
    /// A wake-up is queued, or the watcher waits for its peer to read (under the hub's lock).
    var scheduled = false

    init(request: CachetWatchRequest, id: UInt32, onWake: @escaping @Sendable () -> Void) {
        self.request = request
        self.id = id
        self.onWake = onWake
    }

    func wake() { onWake() }
}
