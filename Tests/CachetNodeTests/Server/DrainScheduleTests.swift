import Dispatch
import Testing

@testable import CachetNode

/// When a drain closes a connection (``DrainSchedule``), without sockets.
@Suite("Drain schedule")
struct DrainScheduleTests {
    static let start = DispatchTime(uptimeNanoseconds: 1_000_000_000)

    @Test func aLeavingMemberAnswersNothingMoreFromTheStart() {
        let schedule = DrainSchedule(start: Self.start, timeout: 10, leaving: true)
        #expect(schedule.closes(.answering, now: Self.start))
        #expect(!schedule.closes(.gone, now: Self.start + 9))
        // A connection waiting for the disk or its forwards still gets until three quarters of the timeout.
        #expect(!schedule.closes(.waiting, now: Self.start + 1.0))
        #expect(!schedule.closes(.waiting, now: Self.start + 7.4))
        #expect(schedule.closes(.waiting, now: Self.start + 7.5))
    }

    @Test func aNodeOnItsOwnAnswersWhatItHadReadForASecondAtMost() {
        let schedule = DrainSchedule(start: Self.start, timeout: 10, leaving: false)
        #expect(!schedule.closes(.answering, now: Self.start + 0.9))
        #expect(schedule.closes(.answering, now: Self.start + 1.0))
        #expect(!schedule.closes(.waiting, now: Self.start + 1.0))
        #expect(schedule.closes(.waiting, now: Self.start + 7.5))
        // A short timeout bounds it too.
        let short = DrainSchedule(start: Self.start, timeout: 1, leaving: false)
        #expect(short.closes(.answering, now: Self.start + 0.75))
    }

    @Test func gracefulClosesEndBeforeTheServersDeadline() {
        #expect(DrainSchedule(start: Self.start, timeout: 10, leaving: false).closesEnd == Self.start + 8.95)
        #expect(DrainSchedule(start: Self.start, timeout: 1, leaving: true).closesEnd == Self.start + 0.85)
        #expect(DrainSchedule(start: Self.start, timeout: 0, leaving: true).closesEnd == Self.start + 0.05)
    }
}
