import CachetWire
import Testing

@testable import CachetClient

/// ``WatchStateMachine`` without sockets: the backoff between connections (100 ms doubling to 2 s, back
/// to 100 ms once a WATCH is accepted), resuming after the last change delivered, and a stop that no later
/// event undoes.
@Suite("CachetClient: a node's watch, as a state machine")
struct WatchStateMachineTests {
    @Test func failedConnectionsBackOffFrom100msDoublingTo2s() {
        var machine = WatchStateMachine()
        #expect(machine.start() == .connect(resumingAfter: nil))
        var waits: [Duration] = []
        for _ in 0..<7 {
            guard case .retry(let wait) = machine.connectionEnded() else {
                Issue.record("no retry after a failed connection")
                return
            }
            waits.append(wait)
            #expect(machine.retryDue() == .connect(resumingAfter: nil))
        }
        #expect(waits == [100, 200, 400, 800, 1600, 2000, 2000].map { Duration.milliseconds($0) })
    }

    @Test func anAcceptedWatchResetsTheBackoffAndTheNextConnectionResumesAfterTheLastEvent() {
        var machine = WatchStateMachine()
        _ = machine.start()
        _ = machine.connectionEnded()
        _ = machine.retryDue()
        _ = machine.connectionEnded()
        #expect(machine.retryDue() == .connect(resumingAfter: nil))
        // Events before the WATCH's reply are not delivered.
        #expect(machine.received(sequence: 3) == nil)
        machine.accepted(at: CachetWatchPosition(run: 7, sequence: 10))
        #expect(machine.state == .watching(run: 7))
        #expect(machine.received(sequence: 12) == CachetWatchPosition(run: 7, sequence: 12))
        #expect(machine.received(sequence: 15) == CachetWatchPosition(run: 7, sequence: 15))
        #expect(machine.connectionEnded() == .retry(after: .milliseconds(100)))
        #expect(machine.retryDue() == .connect(resumingAfter: CachetWatchPosition(run: 7, sequence: 15)))
        // A refused WATCH: the position is kept, the backoff grows.
        #expect(machine.connectionEnded() == .retry(after: .milliseconds(200)))
        #expect(machine.retryDue() == .connect(resumingAfter: CachetWatchPosition(run: 7, sequence: 15)))
    }

    @Test func aStoppedWatchDoesNothingMore() {
        var machine = WatchStateMachine()
        _ = machine.start()
        let wasGoing = machine.stop()
        let stoppedTwice = machine.stop()
        #expect(wasGoing)
        #expect(!stoppedTwice)
        #expect(machine.connectionEnded() == .none)
        #expect(machine.retryDue() == .none)
        #expect(machine.start() == .none)
        machine.accepted(at: CachetWatchPosition(run: 1, sequence: 1))
        #expect(machine.received(sequence: 2) == nil)
        #expect(machine.state == .stopped)
    }
}
