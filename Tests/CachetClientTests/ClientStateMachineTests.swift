import Testing

@testable import CachetClient

/// The connection and health state machines, driven by events without any socket.
@Suite("CachetClient state machines")
struct ClientStateMachineTests {
    typealias Machine = ConnectionStateMachine<String>

    @Test("the first request connects, later ones queue, then are written; replies match in order")
    func connectAndReply() {
        var machine = Machine()
        #expect(machine.issue(id: 1, waiter: "a", deadline: 100) == .connect)
        #expect(machine.issue(id: 2, waiter: "b", deadline: 100) == .wait)
        let queued = machine.connected()
        #expect(queued)
        #expect(machine.state == .ready)
        #expect(machine.issue(id: 3, waiter: "c", deadline: 100) == .write)
        #expect(machine.inFlight == 3)
        guard case .deliver("a") = machine.replyReceived(id: 1) else {
            Issue.record("reply 1 not delivered to a")
            return
        }
        guard case .deliver("b") = machine.replyReceived(id: 2) else {
            Issue.record("reply 2 not delivered to b")
            return
        }
        #expect(machine.waiting == 1)
    }

    @Test("a cancelled request keeps its place: its reply is dropped, the next one matched")
    func abandon() {
        var machine = Machine()
        _ = machine.issue(id: 7, waiter: "a", deadline: 100)
        _ = machine.issue(id: 8, waiter: "b", deadline: 100)
        _ = machine.connected()
        #expect(machine.abandon(id: 7) == "a")
        #expect(machine.abandon(id: 7) == nil)
        #expect(machine.waiting == 1)
        guard case .discard = machine.replyReceived(id: 7) else {
            Issue.record("the abandoned request's reply was not dropped")
            return
        }
        guard case .deliver("b") = machine.replyReceived(id: 8) else {
            Issue.record("reply 8 not delivered")
            return
        }
        #expect(machine.inFlight == 0)
    }

    @Test("requests past their deadline time out; the earliest deadline is the next still waited for")
    func expire() {
        var machine = Machine()
        _ = machine.issue(id: 1, waiter: "a", deadline: 10)
        _ = machine.issue(id: 2, waiter: "b", deadline: 30)
        _ = machine.issue(id: 3, waiter: "c", deadline: 20)
        #expect(machine.earliestDeadline == 10)
        #expect(machine.expire(now: 9) == [])
        #expect(machine.expire(now: 20) == ["a", "c"])
        #expect(machine.earliestDeadline == 30)
        #expect(machine.inFlight == 3)
        #expect(machine.waiting == 1)
    }

    @Test("a reply that is not the head's fails everything in flight")
    func protocolViolation() {
        var machine = Machine()
        _ = machine.issue(id: 1, waiter: "a", deadline: 10)
        _ = machine.issue(id: 2, waiter: "b", deadline: 10)
        _ = machine.connected()
        guard case .protocolViolation(let waiters) = machine.replyReceived(id: 2) else {
            Issue.record("an out-of-order reply was accepted")
            return
        }
        #expect(waiters == ["a", "b"])
        #expect(machine.state == .idle)
        #expect(machine.issue(id: 3, waiter: "c", deadline: 10) == .connect)
    }

    @Test("a closed connection fails its requests and reconnects for the next")
    func closed() {
        var machine = Machine()
        _ = machine.issue(id: 1, waiter: "a", deadline: 10)
        _ = machine.connected()
        #expect(machine.closed() == ["a"])
        #expect(machine.state == .idle)
        #expect(machine.issue(id: 2, waiter: "b", deadline: 10) == .connect)
    }

    @Test("draining refuses new requests and ends after the last reply")
    func drain() {
        var machine = Machine()
        let idleDrained = machine.drain()
        #expect(idleDrained)
        #expect(machine.issue(id: 1, waiter: "a", deadline: 10) == .rejectShutdown)

        var busy = Machine()
        _ = busy.issue(id: 1, waiter: "a", deadline: 10)
        _ = busy.connected()
        let busyDrained = busy.drain()
        #expect(!busyDrained)
        #expect(busy.state == .draining)
        #expect(busy.issue(id: 2, waiter: "b", deadline: 10) == .rejectShutdown)
        _ = busy.replyReceived(id: 1)
        #expect(busy.state == .shutdown)
    }

    @Test("the ring keeps order across growth and wrap-around")
    func ringGrowth() {
        var ring = RequestRing<Int>()
        var expected: [UInt32] = []
        var next: UInt32 = 0
        for round in 0..<50 {
            for _ in 0..<(round % 7 + 3) {
                ring.append(PendingRequest(id: next, deadline: 0, waiter: Int(next)))
                expected.append(next)
                next += 1
            }
            for _ in 0..<(round % 5 + 1) where !expected.isEmpty {
                #expect(ring.removeFirst()?.id == expected.removeFirst())
            }
            #expect(ring.count == expected.count)
        }
        #expect(ring.removeAll().map(UInt32.init) == expected)
        #expect(ring.isEmpty)
    }
}
