import CEpoll
import Testing

@testable import CachetNode

/// The epoll interest is derived from the connection's phase in one place; these check, without a
/// socket, that no live phase is registered for nothing and that every phase waiting on its socket is
/// registered for the event it waits for.
@Suite("Connection: epoll interest from the phase")
struct ConnectionPhaseTests {
    static var livePhases: [Connection.Phase] {
        [
            .reading(frameLength: 0),
            .reading(frameLength: 70_000),
            .waitingForOutput,
            .waitingForMemory(.input(frameLength: 1 << 20)),
            .waitingForMemory(.reply),
            .waitingForCompletion,
            .waitingForForwards,
            .finishing,
            .closing(Connection.Closing(deadline: 0)),
            .closing(Connection.Closing(deadline: 0, writeShut: true)),
        ]
    }

    @Test func everyLivePhaseIsRegisteredForSomething() {
        for phase in Self.livePhases {
            for pending in [false, true] {
                let interest = Connection.interest(for: phase, outputPending: pending)
                #expect(interest & cachet_EPOLLRDHUP != 0, "\(phase) with output pending \(pending)")
                if pending { #expect(interest & cachet_EPOLLOUT != 0, "\(phase) must send its output") }
            }
        }
        #expect(Connection.interest(for: .closed, outputPending: false) == 0)
    }

    @Test func phasesThatReadAreRegisteredForInputAndOthersAreNot() {
        for phase in Self.livePhases {
            let interest = Connection.interest(for: phase, outputPending: false)
            let reads: Bool
            switch phase {
            case .reading, .closing: reads = true
            default: reads = false
            }
            #expect((interest & cachet_EPOLLIN != 0) == reads, "\(phase)")
        }
    }

    /// The state that used to hang: output over its limit, then drained within the same call. Waiting
    /// for output is registered for EPOLLOUT even with nothing pending, so the kernel reports the socket
    /// writable and the loop re-examines the connection.
    @Test func waitingForOutputAlwaysWaitsForWritability() {
        for pending in [false, true] {
            let interest = Connection.interest(for: .waitingForOutput, outputPending: pending)
            #expect(interest & cachet_EPOLLOUT != 0)
            #expect(interest & cachet_EPOLLIN == 0)
        }
    }
}
