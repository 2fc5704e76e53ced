import CachetLocking
import CachetTestSupport
import Foundation
import Synchronization
import Testing

@testable import CachetClient

#if canImport(Glibc)
import Glibc
#endif

/// A call that is the client's only one spins briefly for its reply (`LoneCallerSpin`): when it may, for
/// how long, and that answers, cancellations and timeouts reach it as before, alone and among many calls.
@Suite("CachetClient lone callers")
struct ClientLoneCallerTests {
    @Test("a lone call may spin, an overlapping one may not; slow lone calls turn spinning off, fast ones on")
    func budget() {
        let spin = LoneCallerSpin(maximumSpin: .microseconds(300))
        let first = spin.begin()
        #expect(first.lone)
        #expect(first.budget > 0 && first.budget <= 300_000)
        let second = spin.begin()
        #expect(!second.lone && second.budget == 0)
        spin.end(lone: second.lone, began: 0)
        spin.end(lone: first.lone, began: monotonicNanoseconds())
        // Lone calls answered after 1 ms: the average climbs past the limit, and lone calls stop spinning.
        for _ in 0..<40 {
            let call = spin.begin()
            #expect(call.lone)
            spin.end(lone: call.lone, began: monotonicNanoseconds() - 1_000_000)
        }
        #expect(spin.average > spin.spinningAverageLimit)
        let slow = spin.begin()
        #expect(slow.lone && slow.budget == 0)
        spin.end(lone: slow.lone, began: monotonicNanoseconds() - 1_000_000)
        // Answered at once again: spinning comes back, with the smallest budget.
        for _ in 0..<80 {
            let call = spin.begin()
            spin.end(lone: call.lone, began: monotonicNanoseconds())
        }
        let fast = spin.begin()
        #expect(fast.lone && fast.budget > 0 && fast.budget < 2 * LoneCallerSpin.budgetSlack)
        spin.end(lone: fast.lone, began: monotonicNanoseconds())
        // Turned off: never spins, and counts nothing (no call is reported lone, none feeds the average).
        let off = LoneCallerSpin(maximumSpin: .zero)
        let call = off.begin()
        #expect(!call.lone && call.budget == 0)
        off.end(lone: call.lone, began: monotonicNanoseconds())
    }

    @Test("a spin ends as soon as its call is answered, and at its budget otherwise")
    func spinEnds() {
        final class Flag: Sendable {
            let value = Atomic<Bool>(false)
        }
        let answered = Flag()
        let began = ContinuousClock.now
        Thread.detachNewThread {
            usleep(20_000)
            answered.value.store(true, ordering: .releasing)
        }
        // A budget of 10 s: only the answer ends it.
        LoneCallerSpin.spin(budget: 10_000_000_000) { answered.value.load(ordering: .acquiring) }
        let took = ContinuousClock.now - began
        let wasAnswered = answered.value.load(ordering: .acquiring)
        #expect(wasAnswered)
        #expect(took < .seconds(5))
        let unanswered = ContinuousClock.now
        LoneCallerSpin.spin(budget: 2_000_000) { false }
        let spun = ContinuousClock.now - unanswered
        #expect(spun >= .milliseconds(2) && spun < .seconds(5))
    }

    @Test("sequential calls of one task get their own replies (values checked), batches beside them too")
    func sequentialValues() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        try await withClient(cluster.configuration()) { client in
            for index in 0..<300 {
                let key = "lone:\(index)"
                let value = (0..<(index % 50 + 1)).map { UInt8(truncatingIfNeeded: $0 &+ index) }
                try await client.put(key, value: value)
                #expect(try await client.get(key) == value)
                if index % 100 == 0 {
                    let got = try await client.get(["lone:0", key])
                    #expect(got.count == 2 && got[0] != nil && got[1] == value)
                }
            }
            #expect(try await client.delete("lone:7"))
            #expect(try await client.get("lone:7") == nil)
        }
    }

    /// Sends a PING on `node` through the client's `send`, recording its slot, its request id and the slot's
    /// failures mark (taken before issuing) in `issued`.
    static func recordedPing(
        _ client: CachetClient,
        on node: NodeClient,
        within seconds: UInt64,
        into issued: CachetLock<(ConnectionSlot, UInt32, UInt32)?>
    ) async -> ClientOutcome {
        await client.send(on: node, deadline: monotonicNanoseconds() + seconds * 1_000_000_000) {
            slot,
            id,
            waiter,
            deadline in
            issued.withLock { $0 = (slot, id, slot.failuresMark()) }
            slot.issue(.bare(.ping), id: id, waiter: waiter, deadline: deadline)
        }
    }

    @Test("a cancelled request is reported to a spinning caller as resumed")
    func cancellationEndsSpin() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        let pid = cluster.processes[0].process.processIdentifier
        defer { kill(pid, SIGCONT) }
        let configuration = cluster.configuration(timeout: .seconds(20)) { $0.connectionsPerNode = 1 }
        try await withClient(configuration) { client in
            try await client.put("k", value: [1])
            await freeze(pid)
            let node = client.nodes[0]
            let issued = CachetLock<(ConnectionSlot, UInt32, UInt32)?>(nil)
            let call = Task { await Self.recordedPing(client, on: node, within: 20, into: issued) }
            let deadline = ContinuousClock.now + .seconds(10)
            while issued.withLock({ $0 }) == nil && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(1))
            }
            guard let (slot, id, mark) = issued.withLock({ $0 }) else {
                Issue.record("the request was never issued")
                return
            }
            #expect(!slot.isAnswered(id: id, failuresMark: mark))
            call.cancel()
            guard case .failure(let error) = await call.value else {
                Issue.record("a cancelled request was answered")
                return
            }
            #expect(error.code == .cancelled)
            #expect(slot.isAnswered(id: id, failuresMark: mark))
            kill(pid, SIGCONT)
            #expect(try await client.get("k") == [1])
        }
    }

    @Test("a call refused before it is sent (its task already cancelled) is reported to a spinning caller at once")
    func refusalEndsSpin() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        try await withClient(cluster.configuration()) { client in
            let node = client.nodes[0]
            let resumedWithinIssue = CachetLock<Bool?>(nil)
            let call = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return await client.send(on: node, deadline: monotonicNanoseconds() + 5_000_000_000) {
                    slot,
                    id,
                    waiter,
                    deadline in
                    let mark = slot.failuresMark()
                    slot.issue(.bare(.ping), id: id, waiter: waiter, deadline: deadline)
                    // The refusal resumed the caller inside issue: a spin that followed would end at once.
                    resumedWithinIssue.withLock { $0 = slot.isAnswered(id: id, failuresMark: mark) }
                }
            }
            guard case .failure(let error) = await call.value else {
                Issue.record("a call from a cancelled task was answered")
                return
            }
            #expect(error.code == .cancelled)
            #expect(resumedWithinIssue.withLock { $0 } == true)
        }
    }

    @Test("a call failed without a reply (a refused connection) is reported to a spinning caller")
    func failureEndsSpin() async throws {
        let client = try CachetClient(
            configuration: .init(nodes: [.init(host: "127.0.0.1", port: closedPort())])
        )
        let issued = CachetLock<(ConnectionSlot, UInt32, UInt32)?>(nil)
        let outcome = await Self.recordedPing(client, on: client.nodes[0], within: 5, into: issued)
        guard case .failure(let error) = outcome, let (slot, id, mark) = issued.withLock({ $0 }) else {
            Issue.record("a call to a closed port was answered, or never issued")
            await client.shutdown()
            return
        }
        #expect(error.code == .connectionFailed)
        // The slot tells its spinner right after the resumption, on the loop's thread.
        let deadline = ContinuousClock.now + .seconds(1)
        while !slot.isAnswered(id: id, failuresMark: mark) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(1))
        }
        #expect(slot.isAnswered(id: id, failuresMark: mark))
        await client.shutdown()
    }

    @Test("per-node commands (ping, stats, clear) are calls in flight: none of their requests spins or counts as lone")
    func perNodeCommandsAreNotLone() async throws {
        let cluster = try await NodeCluster.start(count: 2)
        try await withClient(cluster.configuration()) { client in
            try await client.put("warm", value: [1])
            let before = client.loneCallerSpin.average
            _ = try await client.ping()
            _ = try await client.stats()
            // A lone call would have moved the average of lone calls' latencies.
            #expect(client.loneCallerSpin.average == before)
        }
    }

    @Test("a lone call to a frozen node times out at its timeout; a lone call cancelled fails at once")
    func loneTimeoutAndCancellation() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        let pid = cluster.processes[0].process.processIdentifier
        defer { kill(pid, SIGCONT) }
        let configuration = cluster.configuration(timeout: .seconds(1)) {
            $0.connectionsPerNode = 1
            $0.timeoutsBeforeDown = 100
        }
        try await withClient(configuration) { client in
            try await client.put("k", value: [1])
            await freeze(pid)
            let (_, took, stall) = await measureWithStalls {
                await expectFailure(.timeout) { () throws(CachetClientError) in _ = try await client.get("k") }
            }
            #expect(took >= .milliseconds(900))
            #expect(took < .seconds(2) + stall)
        }
        // Cancelled: a client whose timeout no loaded machine reaches before the cancellation, so that only
        // the cancellation can end the call.
        let patient = cluster.configuration(timeout: .seconds(60)) {
            $0.connectionsPerNode = 1
            $0.timeoutsBeforeDown = 100
        }
        try await withClient(patient) { client in
            let call = Task { () throws(CachetClientError) -> [UInt8]? in try await client.get("k") }
            try await Task.sleep(for: .milliseconds(100))
            await expectCancelledPromptly(call)
            kill(pid, SIGCONT)
            #expect(try await client.get("k") == [1])
        }
    }

    @Test("64 tasks on one connection, some cancelled at random: every call ends, every value is right")
    func manyTasksWithCancellations() async throws {
        let cluster = try await NodeCluster.start(count: 1)
        let configuration = cluster.configuration(timeout: .seconds(20)) { $0.connectionsPerNode = 1 }
        let client = try CachetClient(configuration: configuration)
        // Run apart, so that a call that never ends (a lost reply) fails the test instead of hanging it.
        let run = Task { () -> (calls: Int, wrong: Int) in
            for key in 0..<64 { try? await client.put("many:\(key)", value: Array("value \(key)".utf8)) }
            let stop = ContinuousClock.now + .milliseconds(1500)
            return await withTaskGroup(of: (Int, Int).self) { group in
                for task in 0..<64 {
                    group.addTask {
                        var calls = 0
                        var wrong = 0
                        while ContinuousClock.now < stop {
                            let key = (task &* 7 &+ calls) % 64
                            let expected = Array("value \(key)".utf8)
                            if calls % 97 == task % 97 {
                                // Cancelled while in flight (or before): fails with cancelled, or was answered.
                                let call = Task { try await client.get("many:\(key)") }
                                call.cancel()
                                switch await call.result {
                                case .success(let value): if value != expected { wrong += 1 }
                                case .failure(let error):
                                    if (error as? CachetClientError)?.code != .cancelled { wrong += 1 }
                                }
                            } else if (try? await client.get("many:\(key)")) != expected {
                                wrong += 1
                            }
                            calls += 1
                        }
                        return (calls, wrong)
                    }
                }
                var totals = (calls: 0, wrong: 0)
                for await (calls, wrong) in group {
                    totals.calls += calls
                    totals.wrong += wrong
                }
                return totals
            }
        }
        // Every call ends: the run lasts its 1.5 s plus the last calls' round trips, far below 30 s.
        guard let counts = await value(of: run, within: .seconds(30)) else {
            Issue.record("calls still unanswered 30 s after the load started")
            return
        }
        await client.shutdown()
        #expect(counts.calls > 64)
        #expect(counts.wrong == 0, "\(counts.wrong) wrong or failed calls")
    }

    /// The value of `task`, or nil when it has not finished within `limit` (the task is then left running).
    private func value<T: Sendable>(of task: Task<T, Never>, within limit: Duration) async -> T? {
        let result = CachetLock<(done: Bool, value: T?)>((false, nil))
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            @Sendable func finish(_ value: T?) {
                let first = result.withLock { state -> Bool in
                    guard !state.done else { return false }
                    state = (true, value)
                    return true
                }
                if first { continuation.resume() }
            }
            Task { finish(await task.value) }
            Thread.detachNewThread {
                Thread.sleep(forTimeInterval: Double(limit.components.seconds))
                finish(nil)
            }
        }
        return result.withLock { $0.value }
    }
}
