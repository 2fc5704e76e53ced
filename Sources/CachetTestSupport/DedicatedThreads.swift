import CachetLocking
import Foundation
public import Testing

/// A suite or test trait that runs every test on threads of its own instead of the task pool's.
///
/// Swift Testing calls a test from a task, and a task runs on the cooperative pool, which has one thread
/// per core (two on the project's machine and in CI). A test that waits synchronously — a node process
/// starting, a `TestSocket` read with a timeout, `Thread.sleep`, `waitUntilExit` — holds its pool thread
/// all that time, synchronous tests included. Two such tests together leave no thread for any other task,
/// and every async test (notably the `CachetClient` ones, whose continuations resume on the pool) stalls
/// for as long.
///
/// With this trait each test case runs under a task executor preference for a ``DedicatedThreadExecutor``:
/// its body, and every child task it starts, runs on threads that are not the pool's, so it may block as
/// it likes. At most ``DedicatedThreadsTrait/width`` such test cases run at once (a test waits for its
/// turn without holding a thread), which keeps the number of node processes started at once where it was
/// when the pool's width bounded it.
///
/// Put it on every suite whose tests wait synchronously for longer than a few milliseconds:
/// `@Suite("Node processes", .dedicatedThreads)`. Async tests that only wait with `await` (the client
/// suites) stay on the pool and need no trait.
public struct DedicatedThreadsTrait: SuiteTrait, TestTrait, TestScoping {
    /// Applied to every test of a suite, nested suites included.
    public var isRecursive: Bool { true }

    /// How many test cases with this trait may run at once: `CACHET_TEST_THREADS` when set, else the
    /// number of active processors (at least 2).
    public static let width: Int = {
        if let text = ProcessInfo.processInfo.environment["CACHET_TEST_THREADS"], let value = Int(text), value > 0 {
            return value
        }
        return max(2, ProcessInfo.processInfo.activeProcessorCount)
    }()

    /// The turns of every test case with this trait (or ``NodeTurnTrait``) in this process; one per process,
    /// as the pool is.
    private static let turns = TestTurns(width: width)

    /// Scopes each test case (not the suite or a parameterized function as a whole).
    /// - Parameters:
    ///   - test: the test or suite.
    ///   - testCase: the test case, nil for a suite or a function as a whole.
    /// - Returns: this trait for a test case, nil otherwise.
    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    /// Waits for a turn, then runs the test case on dedicated threads.
    /// - Parameters:
    ///   - test: the test.
    ///   - testCase: the test case.
    ///   - function: the test case's body.
    /// - Throws: what the body throws.
    public func provideScope(
        for test: Test,
        testCase: Test.Case?,
        performing function: @Sendable () async throws -> Void
    ) async throws {
        try await Self.withTurn(for: test) {
            try await withTaskExecutorPreference(DedicatedThreadExecutor()) { try await function() }
        }
    }

    /// Runs `body` in one of the turns (``width`` at once). A test with a time limit goes ahead of the queue:
    /// its limit runs while it waits for a turn.
    static func withTurn(for test: Test, _ body: () async throws -> Void) async throws {
        await turns.acquire(first: test.timeLimit != nil)
        defer { turns.release() }
        try await body()
    }
}

/// A suite or test trait for async tests that start node clusters and wait for them with `await` (the
/// `CachetClient` cluster suites): each test case takes one of the turns ``DedicatedThreadsTrait`` gives, so
/// that no more node-heavy test cases run at once than there are cores, but stays on the task pool. Without
/// it such a suite ran beside two dedicated ones, three clusters of nodes on two cores, and its forwards and
/// batches timed out.
public struct NodeTurnTrait: SuiteTrait, TestTrait, TestScoping {
    /// Applied to every test of a suite, nested suites included.
    public var isRecursive: Bool { true }

    /// Scopes each test case (not the suite or a parameterized function as a whole).
    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil ? nil : self
    }

    /// Waits for a turn, then runs the test case where it is.
    public func provideScope(
        for test: Test,
        testCase: Test.Case?,
        performing function: @Sendable () async throws -> Void
    ) async throws {
        try await DedicatedThreadsTrait.withTurn(for: test, function)
    }
}

extension Trait where Self == NodeTurnTrait {
    /// Takes a turn among the node-heavy tests, on the task pool: see ``NodeTurnTrait``.
    public static var nodeTurn: Self { NodeTurnTrait() }
}

extension Trait where Self == DedicatedThreadsTrait {
    /// Runs each test case on threads of its own, not the task pool's: see ``DedicatedThreadsTrait``.
    public static var dedicatedThreads: Self { DedicatedThreadsTrait() }
}

/// A task executor that runs every job on a new thread of its own.
///
/// A thread per job rather than one per executor: a test's child tasks (a task group of blocking clients)
/// run side by side as they would on the pool, and none can wait for another that has no thread. The jobs
/// of the tests that use it are few (a synchronous test is one), so the cost of a thread each is nothing.
public final class DedicatedThreadExecutor: TaskExecutor {
    /// Creates an executor; it holds no thread until a job arrives.
    public init() {}

    /// Runs `job` on a new thread.
    /// - Parameter job: the job.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        Thread.detachNewThread {
            Thread.current.threadDictionary[DedicatedThreadExecutor.marker] = true
            job.runSynchronously(on: executor)
        }
    }

    /// The key that marks its threads in their thread dictionaries.
    private static let marker = "cachet.test.dedicated-thread"

    /// Whether the calling thread is one that a ``DedicatedThreadExecutor`` started.
    public static var isCurrent: Bool { Thread.current.threadDictionary[marker] as? Bool == true }
}

/// A counting semaphore whose waiters are suspended tasks, not blocked threads.
///
/// `@unchecked Sendable` is not needed: the state lives in a ``CachetLock``.
final class TestTurns: Sendable {
    private struct State {
        var available: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
        /// How many of `waiters`, from the front, came with `first`.
        var firstWaiters = 0
    }
    private let state: CachetLock<State>

    init(width: Int) { state = CachetLock(State(available: width)) }

    /// Takes a turn, suspending (without holding a thread) until one is free.
    /// - Parameter first: whether to wait ahead of the waiters without `first`.
    func acquire(first: Bool = false) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.available > 0 {
                    state.available -= 1
                    return true
                }
                if first {
                    state.waiters.insert(continuation, at: state.firstWaiters)
                    state.firstWaiters += 1
                } else {
                    state.waiters.append(continuation)
                }
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Gives a turn back, to the longest waiter if there is one.
    func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiters.isEmpty {
                state.available += 1
                return nil
            }
            state.firstWaiters = max(0, state.firstWaiters - 1)
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}
