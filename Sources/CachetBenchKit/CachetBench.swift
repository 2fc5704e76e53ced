import CachetIO
import CachetLocking
import Dispatch
import Foundation
import Histogram
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Runs a load: connects, optionally prefills and warms up, measures, and reports.
public enum CachetBench {
    /// Runs `configuration` on `configuration.threads` event loops of its own (one serial queue each) and
    /// reports.
    ///
    /// With `requests` 0 and `prefill`, it only writes every key once (a fill, as for memory
    /// measurements); the report's `prefill` says how it went.
    /// - Parameters:
    ///   - configuration: what to run.
    ///   - progress: called about once a second, on the calling thread.
    /// - Returns: the measurements.
    /// - Throws: ``BenchError`` for a bad configuration, a refused connection, or a server that closed a
    ///   connection or broke the protocol.
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
        let data = try BenchDataSet(configuration: configuration)
        let chooser = KeyChooser(count: configuration.keys, distribution: configuration.distribution)

        // Connection i goes to server i % servers and to thread (i / servers) % threads, so that every
        // thread has a connection to every server.
        let serverCount = configuration.targets.count
        var perThread = [[(fd: Int32, tls: CachetTLSSession?, target: Int)]](
            repeating: [],
            count: configuration.threads
        )
        func closeAll() { for sockets in perThread { for socket in sockets { CachetSocket.close(socket.fd) } } }
        var tls: CachetTLSContext?
        if let settings = configuration.tls {
            do {
                tls = try CachetTLSContext(role: .client, configuration: settings)
            } catch {
                throw BenchError(.invalidConfiguration, "--tls: \(error.message)")
            }
        }
        for index in 0..<configuration.connections {
            let target = index % serverCount
            let opened: (fd: Int32, tls: CachetTLSSession?)
            do {
                opened = try openConnection(to: configuration.targets[target], tls: tls)
            } catch {
                closeAll()
                throw error
            }
            perThread[(index / serverCount) % configuration.threads].append((opened.fd, opened.tls, target))
        }
        var workers: [LoadWorker<Driver>] = []
        for thread in perThread.indices {
            do {
                workers.append(
                    try LoadWorker(
                        index: thread,
                        driver: driver,
                        data: data,
                        chooser: chooser,
                        configuration: configuration,
                        seed: configuration.seed &+ UInt64(thread) &* 0x9E37_79B9_7F4A_7C15
                    )
                )
            } catch {
                closeAll()
                throw error
            }
        }
        // Each worker's loop owns its sockets from here, and closes them when it stops.
        for (worker, sockets) in zip(workers, perThread) { worker.register(sockets) }
        defer { for worker in workers { worker.close() } }
        let threads = workers

        /// Runs one phase on every thread, calling `progress` once a second meanwhile.
        func phase(
            prefilling: Bool,
            warmingUp: Bool,
            _ work: (Int) -> WorkerPhase
        ) throws(BenchError) -> (result: WorkerResult, seconds: Double, cpuSeconds: Double) {
            for thread in threads { thread.counters.reset() }
            let results = CachetLock<[WorkerResult]>([])
            let group = DispatchGroup()
            let cpuBefore = processCPUSeconds()
            let start = monotonicNanoseconds()
            for (index, thread) in threads.enumerated() {
                group.enter()
                thread.run(work(index)) { result in
                    results.withLock { $0.append(result) }
                    group.leave()
                }
            }
            var lastReplies = 0
            var lastTime = start
            while group.wait(timeout: .now() + 1) == .timedOut {
                let now = monotonicNanoseconds()
                var replies = 0
                var hits = 0
                var misses = 0
                var errors = 0
                var recent = makeLatencyHistogram()
                for thread in threads {
                    replies += thread.counters.replies.load(ordering: .relaxed)
                    hits += thread.counters.hits.load(ordering: .relaxed)
                    misses += thread.counters.misses.load(ordering: .relaxed)
                    errors += thread.counters.errors.load(ordering: .relaxed)
                    errors += thread.counters.verificationErrors.load(ordering: .relaxed)
                    thread.counters.recent.withLock {
                        recent.add($0)
                        $0.reset()
                    }
                }
                progress(
                    BenchProgress(
                        elapsed: Double(now - start) / 1e9,
                        opsPerSecond: Double(replies - lastReplies) / (Double(now - lastTime) / 1e9),
                        p99Microseconds: recent.totalCount > 0 ? Double(recent.valueAtPercentile(99)) / 1000 : nil,
                        hitRatio: hits + misses > 0 ? Double(hits) / Double(hits + misses) : 0,
                        errors: errors,
                        prefilling: prefilling,
                        warmingUp: warmingUp
                    )
                )
                lastReplies = replies
                lastTime = now
            }
            let seconds = Double(monotonicNanoseconds() - start) / 1e9
            let cpuSeconds = processCPUSeconds() - cpuBefore
            var merged = WorkerResult()
            for result in results.withLock({ $0 }) { merged.add(result) }
            if let failure = merged.failure { throw failure }
            return (merged, seconds, cpuSeconds)
        }

        var prefillReport: BenchReport.Prefill?
        if configuration.prefill {
            // Each server's keys are split evenly over the threads.
            let threadCount = configuration.threads
            let (result, seconds, _) = try phase(prefilling: true, warmingUp: false) { thread in
                .prefill(
                    positions: (0..<serverCount).map { server in
                        let total = data.keyCount(ofTarget: server)
                        return (total * thread / threadCount)..<(total * (thread + 1) / threadCount)
                    }
                )
            }
            prefillReport = BenchReport.Prefill(
                requests: result.replies,
                seconds: seconds,
                opsPerSecond: seconds > 0 ? Double(result.replies) / seconds : 0,
                errors: result.errors + result.verificationErrors
            )
        }

        if configuration.warmup > 0 && configuration.requests != 0 {
            let deadline = monotonicNanoseconds() + UInt64(configuration.warmup * 1e9)
            _ = try phase(prefilling: false, warmingUp: true) { _ in
                .measure(deadline: deadline, budget: nil, record: false)
            }
        }

        var measured = WorkerResult()
        var elapsed = 0.0
        var cpuSeconds = 0.0
        if configuration.requests != 0 {
            let deadline = configuration.duration.map { monotonicNanoseconds() + UInt64($0 * 1e9) }
            let threadCount = configuration.threads
            let budget = configuration.requests
            (measured, elapsed, cpuSeconds) = try phase(prefilling: false, warmingUp: false) { thread in
                .measure(
                    deadline: deadline,
                    budget: budget.map { $0 / threadCount + (thread < $0 % threadCount ? 1 : 0) },
                    record: true
                )
            }
        }

        return BenchReport(
            protocol: configuration.protocolKind.rawValue,
            targets: configuration.targets.map(\.description),
            config: BenchReport.Settings(
                connections: configuration.connections,
                pipeline: configuration.pipeline,
                threads: configuration.threads,
                keys: configuration.keys,
                keySize: data.keyLength,
                valueSize: configuration.valueSize,
                getRatio: configuration.getRatio,
                keysPerGet: configuration.keysPerGet,
                distribution: configuration.distribution.rawValue,
                prefill: configuration.prefill,
                warmupSeconds: configuration.warmup,
                rate: configuration.rate,
                durationSeconds: configuration.duration,
                requests: configuration.requests,
                seed: configuration.seed
            ),
            durationSeconds: elapsed,
            requests: measured.replies,
            opsPerSecond: elapsed > 0 ? Double(measured.replies) / elapsed : 0,
            hits: measured.hits,
            misses: measured.misses,
            hitRatio: measured.hits + measured.misses > 0
                ? Double(measured.hits) / Double(measured.hits + measured.misses) : 0,
            errors: measured.errors,
            verificationErrors: measured.verificationErrors,
            latencyUs: BenchReport.Latency(nanoseconds: measured.histogram),
            getLatencyUs: measured.getHistogram.totalCount > 0
                ? BenchReport.Latency(nanoseconds: measured.getHistogram) : nil,
            putLatencyUs: measured.putHistogram.totalCount > 0
                ? BenchReport.Latency(nanoseconds: measured.putHistogram) : nil,
            clientCPUSeconds: cpuSeconds,
            prefill: prefillReport
        )
    }
}

/// User and system CPU seconds of this process so far.
func processCPUSeconds() -> Double {
    var usage = rusage()
    _ = getrusage(Int32(RUSAGE_SELF.rawValue), &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

extension BenchReport.Latency {
    /// The percentiles of a histogram of nanoseconds, in microseconds; all 0 when it is empty.
    init(nanoseconds histogram: Histogram<UInt64>) {
        let empty = histogram.totalCount == 0
        func microseconds(_ percentile: Double) -> Double {
            empty ? 0 : Double(histogram.valueAtPercentile(percentile)) / 1000
        }
        self.init(
            p50: microseconds(50),
            p99: microseconds(99),
            p999: microseconds(99.9),
            max: empty ? 0 : Double(histogram.max) / 1000,
            mean: empty ? 0 : histogram.mean / 1000
        )
    }
}
