import CachetWire

/// A WATCH's request and id, as ``PendingOperation/watch(_:)`` carries them.
final class WatchStart: Sendable {
    let request: CachetWatchRequest
    let id: UInt32

    init(request: CachetWatchRequest, id: UInt32) {
        self.request = request
        self.id = id
    }
}
