/// A loop's copy of the prefix index: read by that loop's writes without a lock, replaced on that loop by
/// the hub when prefixes come and go (``NodeWatchHub/attach(_:execute:)``); nil while nothing is watched.
final class WatchIndexView: @unchecked Sendable {
    private(set) var index: WatchPrefixIndex?
    private var version: UInt64 = 0

    init() {}

    /// Takes `index` unless it already has a newer one (indexes may arrive out of order).
    func install(_ index: WatchPrefixIndex) {
        guard index.version >= version else { return }
        version = index.version
        self.index = index.isEmpty ? nil : index
    }
}
