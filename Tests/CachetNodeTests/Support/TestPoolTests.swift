import CachetTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The test support's waiting conventions: `.dedicatedThreads` keeps blocking tests off the task pool, and
/// `PoolStallMonitor` sees when something holds the pool anyway.
@Suite("Test support: waiting without holding the task pool")
struct TestPoolTests {
    @Test("a synchronous test with .dedicatedThreads runs on a thread of its own", .dedicatedThreads)
    func synchronousOffPool() {
        #expect(DedicatedThreadExecutor.isCurrent)
    }

    @Test("an async test with .dedicatedThreads stays off the pool across awaits and in child tasks", .dedicatedThreads)
    func asyncOffPool() async throws {
        #expect(DedicatedThreadExecutor.isCurrent)
        try await Task.sleep(for: .milliseconds(5))
        #expect(DedicatedThreadExecutor.isCurrent)
        let children = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<3 { group.addTask { DedicatedThreadExecutor.isCurrent } }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(children == [true, true, true])
    }

    @Test("a test without the trait runs on the pool")
    func onPool() {
        #expect(!DedicatedThreadExecutor.isCurrent)
    }

    @Test(
        "blocking child tasks of a .dedicatedThreads test run side by side, beyond the pool's width",
        .dedicatedThreads
    )
    func blockingBeyondPoolWidth() async {
        // On the pool, twice its width of 400 ms blocking waits would take at least 800 ms.
        let count = 2 * ProcessInfo.processInfo.activeProcessorCount
        let start = ContinuousClock.now
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<count { group.addTask { _ = usleep(400_000) } }
        }
        let took = ContinuousClock.now - start
        #expect(took < .milliseconds(750), "\(count) blocking waits of 400 ms took \(took)")
    }

    @Test("the monitor sees a pool whose every thread is blocked")
    func monitorSeesBlockedPool() async {
        let monitor = PoolStallMonitor()
        monitor.start()
        try? await Task.sleep(for: .milliseconds(30))
        // Block every pool thread (and a few more, should the pool grow) for 250 ms, deliberately.
        let blockers = (0..<ProcessInfo.processInfo.activeProcessorCount + 2).map { _ in
            Task.detached { _ = usleep(250_000) }
        }
        for blocker in blockers { await blocker.value }
        try? await Task.sleep(for: .milliseconds(30))
        let report = monitor.stop()
        #expect(report.worst >= .milliseconds(150), "\(report)")
        #expect(report.total >= .milliseconds(150), "\(report)")
        #expect(report.stalls.contains { $0.duration >= .milliseconds(150) }, "\(report)")
    }

    /// `CACHET_POOL_WATCHDOG=SECONDS swift test` watches the pool for that long while the rest of the
    /// suite runs and prints what it saw: the worst wait of a trivial task for a pool thread, the time the
    /// pool was unavailable in all, and every stall over 100 ms (start in seconds since the epoch).
    @Test(
        "pool watchdog over a whole run (CACHET_POOL_WATCHDOG=SECONDS)",
        .enabled(if: ProcessInfo.processInfo.environment["CACHET_POOL_WATCHDOG"] != nil)
    )
    func watchdog() async throws {
        let seconds = Double(ProcessInfo.processInfo.environment["CACHET_POOL_WATCHDOG"] ?? "") ?? 90
        let monitor = PoolStallMonitor()
        monitor.start()
        try await Task.sleep(for: .seconds(seconds))
        let report = monitor.stop()
        let stalls = report.stalls.map { "  stall \($0)" }.joined(separator: "\n")
        print("pool watchdog: \(report)\n\(stalls)")
    }

    /// Files whose tests block only on threads they start themselves (`Members.onThread`, a timer thread),
    /// or on purpose: each is allowed its blocking calls without the trait.
    static let blockingOffPoolByHand: Set<String> = [
        "ClientLoneCallerTests.swift", "ClientClusterFileTests.swift", "TestPoolTests.swift",
    ]

    /// The calls that wait synchronously for a process, a peer or the clock.
    static let blockingCalls = ["try NodeProcess(", "DeployFiles.run(", "Thread.sleep(", "usleep(", ".waitUntilExit()"]

    /// A suite that blocks without `.dedicatedThreads` starves every async test for as long (seen: a
    /// register check on the pool for 30 s, client tests timing out meanwhile). Every suite in a test file
    /// that makes a blocking call carries the trait, unless the file is listed as blocking off the pool by
    /// hand.
    @Test("every suite whose tests block runs on dedicated threads")
    func blockingSuitesRunOffThePool() throws {
        // The repository's Tests/ folder, however deep this file sits in it.
        var tests = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while tests.lastPathComponent != "Tests" && tests.path != "/" { tests.deleteLastPathComponent() }
        let files = try #require(FileManager.default.enumerator(atPath: tests.path)).compactMap { $0 as? String }
        var checked = 0
        for file in files where file.hasSuffix(".swift") {
            let name = URL(fileURLWithPath: file).lastPathComponent
            let text = try String(contentsOf: tests.appendingPathComponent(file), encoding: .utf8)
            let code = text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
            guard let call = Self.blockingCalls.first(where: { call in code.contains { $0.contains(call) } }) else {
                continue
            }
            checked += 1
            guard !Self.blockingOffPoolByHand.contains(name) else { continue }
            for suite in code where suite.contains("@Suite") {
                #expect(
                    suite.contains(".dedicatedThreads"),
                    "\(file) calls \(call) but its suite is on the pool: \(suite)"
                )
            }
        }
        #expect(checked > 20, "only \(checked) files with blocking calls found under \(tests.path)")
    }
}
