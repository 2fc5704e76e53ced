#if canImport(Glibc)
import Glibc
#endif

/// The store's clock: whole seconds since the Unix epoch, as `UInt32`.
///
/// Wall-clock time, so that expiry times written to disk stay meaningful across restarts. Read through
/// `CLOCK_REALTIME_COARSE`, which costs a few nanoseconds (no system call).
public enum CachetClock {
    /// The current time in seconds since 1970-01-01 UTC.
    /// - Returns: seconds, truncated to 32 bits (good until 2106).
    public static func now() -> UInt32 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &time)
        return UInt32(truncatingIfNeeded: time.tv_sec)
    }

    /// Whether an entry with `expiry` is dead at `now` (0 never expires).
    /// - Parameters:
    ///   - expiry: absolute expiry in seconds, 0 for none.
    ///   - now: the current time.
    /// - Returns: true when the entry must no longer be served.
    @inlinable
    public static func isExpired(_ expiry: UInt32, now: UInt32) -> Bool {
        expiry != 0 && expiry <= now
    }
}
