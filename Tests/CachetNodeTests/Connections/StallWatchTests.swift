import Testing

@testable import CachetNode

/// When a connection counts as stalled while others wait for memory (``StallWatch``), without sockets.
@Suite("Stall watch")
struct StallWatchTests {
    static let second: UInt64 = 1_000_000_000

    @Test func aClientThatReadsNothingIsStalledOnceMemoryHasBeenShortForTheTimeout() {
        var watch = StallWatch(timeout: 3 * Self.second)
        let result1 = watch.isWatching(connectionsWaiting: true)
        #expect(result1)
        let result2 = watch.shouldScan(now: 10 * Self.second)
        #expect(result2)
        // It stopped reading long before memory ran short: the clock starts when memory did.
        func stalled(at now: UInt64) -> Bool {
            watch.isStalled(
                pendingReplies: true,
                pendingRequest: false,
                repliesStalledSince: 1 * Self.second,
                requestsStalledSince: 1 * Self.second,
                now: now
            )
        }
        #expect(!stalled(at: 12 * Self.second))
        #expect(stalled(at: 13 * Self.second))
        // Nothing pending of its own: one of those waiting, kept.
        #expect(
            !watch.isStalled(
                pendingReplies: false,
                pendingRequest: false,
                repliesStalledSince: 0,
                requestsStalledSince: 0,
                now: 20 * Self.second
            )
        )
    }

    @Test func aClientThatReadsRepliesIsNotStalledByAHalfSentRequest() {
        var watch = StallWatch(timeout: 3 * Self.second)
        _ = watch.isWatching(connectionsWaiting: true)
        _ = watch.shouldScan(now: 0)
        // Its replies move (taken at 9 s), its last request has been half-sent since 1 s.
        #expect(
            !watch.isStalled(
                pendingReplies: false,
                pendingRequest: true,
                repliesStalledSince: 9 * Self.second,
                requestsStalledSince: 1 * Self.second,
                now: 10 * Self.second
            )
        )
        #expect(
            watch.isStalled(
                pendingReplies: false,
                pendingRequest: true,
                repliesStalledSince: 1 * Self.second,
                requestsStalledSince: 1 * Self.second,
                now: 10 * Self.second
            )
        )
    }

    @Test func scansAreSpacedAndTheClockStartsOverWhenMemoryIsBack() {
        var watch = StallWatch(timeout: Self.second)
        let result3 = watch.isWatching(connectionsWaiting: false)
        #expect(!result3)
        let result4 = watch.isWatching(connectionsWaiting: true)
        #expect(result4)
        let result5 = watch.shouldScan(now: 5 * Self.second)
        #expect(result5)
        let result6 = watch.shouldScan(now: 5 * Self.second + StallWatch.scanInterval / 2)
        #expect(!result6)
        let result7 = watch.shouldScan(now: 5 * Self.second + StallWatch.scanInterval)
        #expect(result7)
        #expect(watch.exhaustedSince == 5 * Self.second)
        _ = watch.isWatching(connectionsWaiting: false)
        #expect(watch.exhaustedSince == 0)
        var off = StallWatch(timeout: 0)
        let offWatching = off.isWatching(connectionsWaiting: true)
        #expect(!offWatching, "0 turns it off")
    }
}
