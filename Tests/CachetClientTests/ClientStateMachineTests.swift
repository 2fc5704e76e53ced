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

    @Test("a refused connect marks a node down at once; timeouts after a few in a row")
    func healthDown() {
        var random = SystemRandomNumberGenerator()
        var health = NodeHealthStateMachine(timeoutsBeforeDown: 3, initialBackoff: 100, maximumBackoff: 1000)
        #expect(health.timedOut(now: 0, using: &random) == nil)
        #expect(health.timedOut(now: 0, using: &random) == nil)
        #expect(health.replied() == nil)  // a reply resets the count
        #expect(health.timedOut(now: 0, using: &random) == nil)
        #expect(health.timedOut(now: 0, using: &random) == nil)
        guard case .wentDown(let probeAt)? = health.timedOut(now: 1000, using: &random) else {
            Issue.record("three timeouts in a row did not mark the node down")
            return
        }
        #expect((1050...1100).contains(probeAt))
        #expect(!health.isUp)
        #expect(health.replied() == .cameUp)

        var refused = NodeHealthStateMachine(timeoutsBeforeDown: 3, initialBackoff: 100, maximumBackoff: 1000)
        guard case .wentDown? = refused.connectFailed(now: 0, using: &random) else {
            Issue.record("a refused connect did not mark the node down")
            return
        }
    }

    @Test("probes back off, doubling up to the maximum, with jitter between half and all of the backoff")
    func healthBackoff() {
        var random = SystemRandomNumberGenerator()
        var health = NodeHealthStateMachine(timeoutsBeforeDown: 1, initialBackoff: 100, maximumBackoff: 500)
        guard case .wentDown(var probeAt)? = health.connectFailed(now: 0, using: &random) else {
            Issue.record("not down")
            return
        }
        let early = health.startProbeIfDue(now: probeAt - 1)
        #expect(!early)
        var now = probeAt
        var backoffs: [UInt64] = []
        for _ in 0..<5 {
            let started = health.startProbeIfDue(now: now)
            let startedTwice = health.startProbeIfDue(now: now)
            #expect(started)
            #expect(!startedTwice)  // one probe at a time
            guard case .probeRescheduled(let next)? = health.probeFailed(now: now, using: &random) else {
                Issue.record("probe failure not rescheduled")
                return
            }
            backoffs.append(next - now)
            probeAt = next
            now = probeAt
        }
        #expect((100...200).contains(backoffs[0]))
        #expect((200...400).contains(backoffs[1]))
        #expect(backoffs[2...].allSatisfy { (250...500).contains($0) })
    }
}
