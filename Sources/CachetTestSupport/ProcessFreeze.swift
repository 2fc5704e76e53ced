import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Stops process `pid` with SIGSTOP and waits, for at most `seconds`, until every one of its threads is
/// stopped.
///
/// `kill` returns before that: the kernel hands the signal to one thread, which stops the others only once it
/// runs, so on a loaded machine the rest of the process (an I/O loop answering requests) runs on for tens of
/// milliseconds. A test that needs a frozen node must wait for it. This one checks every millisecond and
/// blocks its thread: call it from a test on dedicated threads (``DedicatedThreadsTrait``).
/// - Returns: whether every thread was seen stopped.
@discardableResult
public func freeze(_ pid: Int32, within seconds: Double = 5) -> Bool {
    kill(pid, SIGSTOP)
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    repeat {
        if everyThreadIsStopped(pid) { return true }
        usleep(1000)
    } while ContinuousClock.now < deadline
    return false
}

/// Stops process `pid` with SIGSTOP and waits, for at most `seconds`, until every one of its threads is
/// stopped, as ``freeze(_:within:)`` does, but with `Task.sleep` between checks, holding no pool thread.
/// - Returns: whether every thread was seen stopped.
@discardableResult
public func freeze(_ pid: Int32, within seconds: Double = 5) async -> Bool {
    kill(pid, SIGSTOP)
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    repeat {
        if everyThreadIsStopped(pid) { return true }
        try? await Task.sleep(for: .milliseconds(1))
    } while ContinuousClock.now < deadline
    return false
}

/// Whether every thread of process `pid` is in the stopped state (`T` in `/proc/PID/task/TID/stat`).
private func everyThreadIsStopped(_ pid: Int32) -> Bool {
    let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
    return !threads.isEmpty
        && threads.allSatisfy { thread in
            // The state follows the command name, which is in parentheses and may hold any character.
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")"),
                let state = stat[close...].dropFirst(2).first
            else { return false }
            return state == "T"
        }
}
