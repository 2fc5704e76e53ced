import Dispatch
import Testing

@testable import CachetNode

/// When a drain closes a connection (``DrainSchedule``), without sockets.
@Suite("Drain schedule")
struct DrainScheduleTests {
    static let start = DispatchTime(uptimeNanoseconds: 1_000_000_000)

    @Test func aNodeThatStaysServesUntilThreeQuartersOfTheTimeout() {
        let schedule = DrainSchedule(start: Self.start, timeout: 10, quietPeriod: .milliseconds(100), leaving: false)
        let early = Self.start + 1.0
        let late = Self.start + 7.6
        #expect(!schedule.closes(.serving(idle: false), now: early), "a busy connection is still answered")
        #expect(schedule.closes(.serving(idle: true), now: early), "an idle one is closed at once")
        #expect(!schedule.closes(.waiting, now: early))
        #expect(schedule.closes(.serving(idle: false), now: late) && schedule.closes(.waiting, now: late))
        #expect(!schedule.closes(.gone, now: late))
        #expect(schedule.closesEnd == Self.start + 8.95, "graceful closes end before the server's deadline")
    }

    @Test func aLeavingMemberAnswersNothingMoreFromTheStart() {
        let schedule = DrainSchedule(start: Self.start, timeout: 10, quietPeriod: .milliseconds(100), leaving: true)
        #expect(schedule.closes(.serving(idle: false), now: Self.start))
        // A connection waiting for the disk or its forwards still gets until three quarters of the timeout.
        #expect(!schedule.closes(.waiting, now: Self.start + 1.0))
        #expect(schedule.closes(.waiting, now: Self.start + 7.5))
    }

    @Test func quietMeansNothingReceivedForTheQuietPeriod() {
        let schedule = DrainSchedule(start: Self.start, timeout: 1, quietPeriod: .milliseconds(100), leaving: false)
        let now = Self.start + 1.0
        #expect(schedule.isQuiet(since: now - 0.2, now: now))
        #expect(!schedule.isQuiet(since: now - 0.05, now: now))
        #expect(schedule.closesEnd == Self.start + 0.85)
    }
}
