import Dispatch
import Foundation
import Synchronization

/// Runs a load: connects, optionally prefills, measures, and reports.
public enum CachetBench {
    /// Runs `configuration` and reports.
    /// - Parameters:
    ///   - configuration: what to run.
    ///   - progress: called about once a second from the calling thread.
    /// - Returns: the measurements.
    /// - Throws: ``BenchError`` for a bad configuration, a refused connection, or a broken server.
    public static func run(
        _ configuration: BenchConfiguration,
        progress: (BenchProgress) -> Void = { _ in }
    ) throws(BenchError) -> BenchReport {
        try configuration.validate()
        switch configuration.protocolKind {
        case .cachet: return try run(configuration, driver: CachetDriver(), progress: progress)
        case .memcache: return try run(configuration, driver: MemcacheDriver(), progress: progress)
        case .resp: return try run(configuration, driver: RESPDriver(), progress: progress)
        }
    }

    private static func run<Driver: BenchProtocolDriver>(
        _ configuration: BenchConfiguration,
        driver: Driver,
        progress: (BenchProgress) -> Void
    ) throws(BenchError) -> BenchReport {
        let keys = (0..<configuration.keys).map { configuration.key($0) }
        var value = [UInt8](repeating: 0, count: configuration.valueSize)
        for index in value.indices { value[index] = UInt8(0x61 + index % 26) }
        let chooser = KeyChooser(count: configuration.keys, distribution: configuration.distribution)

        // Connections, spread over the targets and then over the threads.
        var perThread = [[BenchConnection]](repeating: [], count: configuration.threads)
        for index in 0..<configuration.connections {
            let target = configuration.targets[index % configuration.targets.count]
            let fd = try openConnection(host: target.host, port: target.port)
            perThread[index % configuration.threads].append(BenchConnection(fd: fd, pipeline: configuration.pipeline))
        }
        let connections = ConnectionsBox(perThread)

        func phase(_ make: @escaping @Sendable (Int) -> WorkerPhase, verify: Bool, prefilling: Bool) throws(BenchError)
            -> (WorkerResult, Double)
        {
            let counters = (0..<configuration.threads).map { _ in WorkerCounters() }
            let results = Mutex<[WorkerResult]>([])
            let group = DispatchGroup()
            let start = Date()
            for thread in 0..<configuration.threads {
                let worker = LoadWorker(
                    driver: driver,
                    configuration: configuration,
                    keys: keys,
                    value: value,
                    chooser: chooser,
                    counters: counters[thread],
                    verify: verify
                )
                group.enter()
                let seed = configuration.seed &+ UInt64(thread) &* 0x9E37_79B9
                Thread.detachNewThread {
                    let result = worker.run(
                        connections: connections.connections[thread],
                        phase: make(thread),
                        seed: seed
                    )
                    results.withLock { $0.append(result) }
                    group.leave()
                }
            }
            var lastReplies = 0
            var lastTime = Date()
            while group.wait(timeout: .now() + 1) == .timedOut {
                let now = Date()
                let replies = counters.reduce(0) { $0 + $1.replies.load(ordering: .relaxed) }
                let hits = counters.reduce(0) { $0 + $1.hits.load(ordering: .relaxed) }
                let misses = counters.reduce(0) { $0 + $1.misses.load(ordering: .relaxed) }
                let errors = counters.reduce(0) { $0 + $1.errors.load(ordering: .relaxed) }
                progress(
                    BenchProgress(
                        elapsed: now.timeIntervalSince(start),
                        opsPerSecond: Double(replies - lastReplies) / now.timeIntervalSince(lastTime),
                        hitRatio: hits + misses > 0 ? Double(hits) / Double(hits + misses) : 0,
                        errors: errors,
                        prefilling: prefilling
                    )
                )
                lastReplies = replies
                lastTime = now
            }
            let elapsed = Date().timeIntervalSince(start)
            var merged = WorkerResult()
            for result in results.withLock({ $0 }) {
                merged.histogram.add(result.histogram)
                merged.replies += result.replies
                merged.hits += result.hits
                merged.misses += result.misses
                merged.errors += result.errors
                merged.verificationErrors += result.verificationErrors
                if let failure = result.failure { throw BenchError(message: failure) }
            }
            return (merged, elapsed)
        }

        if configuration.prefill {
            let threads = configuration.threads
            let total = configuration.keys
            _ = try phase(
                { thread in
                    let share = (total + threads - 1) / threads
                    return .prefill((thread * share)..<min(total, (thread + 1) * share))
                },
                verify: false,
                prefilling: true
            )
        }

        let measured: WorkerResult
        let elapsed: Double
        if configuration.requests == 0 {
            (measured, elapsed) = (WorkerResult(), 0)
        } else {
            let deadline = configuration.duration.map { monotonicNanoseconds() + UInt64($0 * 1e9) }
            let threads = configuration.threads
            let budget = configuration.requests
            (measured, elapsed) = try phase(
                { thread in
                    .measure(deadline: deadline, budget: budget.map { $0 / threads + (thread < $0 % threads ? 1 : 0) })
                },
                verify: configuration.prefill,
                prefilling: false
            )
        }

        let histogram = measured.histogram
        func micro(_ nanoseconds: UInt64) -> Double { Double(nanoseconds) / 1000 }
        return BenchReport(
            protocolName: configuration.protocolKind.rawValue,
            targets: configuration.targets.map { "\($0.host):\($0.port)" },
            connections: configuration.connections,
            pipeline: configuration.pipeline,
            threads: configuration.threads,
            valueSize: configuration.valueSize,
            keys: configuration.keys,
            getRatio: configuration.getRatio,
            distribution: configuration.distribution.rawValue,
            durationSeconds: elapsed,
            requests: measured.replies,
            opsPerSecond: elapsed > 0 ? Double(measured.replies) / elapsed : 0,
            hits: measured.hits,
            misses: measured.misses,
            hitRatio: measured.hits + measured.misses > 0
                ? Double(measured.hits) / Double(measured.hits + measured.misses) : 0,
            errors: measured.errors,
            verificationErrors: measured.verificationErrors,
            latencyMicroseconds: BenchReport.Latency(
                p50: histogram.totalCount > 0 ? micro(histogram.valueAtPercentile(50)) : 0,
                p99: histogram.totalCount > 0 ? micro(histogram.valueAtPercentile(99)) : 0,
                p999: histogram.totalCount > 0 ? micro(histogram.valueAtPercentile(99.9)) : 0,
                max: histogram.totalCount > 0 ? micro(histogram.max) : 0,
                mean: histogram.totalCount > 0 ? histogram.mean / 1000 : 0
            )
        )
    }
}

/// The connections of every thread. `@unchecked Sendable`: each inner array is handed to exactly one
/// worker thread per phase, and phases never overlap.
final class ConnectionsBox: @unchecked Sendable {
    let connections: [[BenchConnection]]
    init(_ connections: [[BenchConnection]]) { self.connections = connections }
}
