import Synchronization

/// What memcached keeps with each item beside its value and expiry: the client's 32-bit flags and the
/// item's CAS unique (`docs/memcached.md`). Kept only with entries written or read through memcached's
/// protocols (or the native `item` flag): an entry that never used them carries none and costs nothing
/// more.
public struct CachetItemFields: Sendable, Hashable {
    /// The client's flags, returned as stored.
    public var flags: UInt32
    /// The CAS unique of this stored version of the item: never 0, different for every version stored on
    /// the node (``CachetCASSource``).
    public var cas: UInt64

    /// Bytes the fields take in an entry, in memory and on disk.
    public static let storedSize = 12

    /// Creates item fields.
    public init(flags: UInt32, cas: UInt64) {
        self.flags = flags
        self.cas = cas
    }
}

/// Where CAS uniques come from on a node: a counter whose high 24 bits are the node's start time in
/// seconds (so a restarted node never hands out a unique it gave before, for the items its disk tier kept),
/// and whose low 40 bits count up from 1. Thread-safe.
public final class CachetCASSource: Sendable {
    private let counter: Atomic<UInt64>

    /// A source starting at `epoch` (seconds; the node's start time).
    public init(epoch: UInt32 = CachetClock.now()) {
        counter = Atomic(UInt64(epoch & 0xff_ffff) << 40)
    }

    /// The next unique: never 0, never the same twice.
    public func next() -> UInt64 {
        counter.add(1, ordering: .relaxed).newValue
    }
}
