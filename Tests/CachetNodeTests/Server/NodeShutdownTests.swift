import CachetLocking
import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// SIGTERM ends a node within `--shutdown-timeout` even while clients keep pipelining requests or never
/// read their replies; each connection ends with FIN after its last reply, and no acknowledged PUT is
/// lost (issue 12, section 5).
@Suite("Node: bounded, graceful shutdown", .dedicatedThreads)
struct NodeShutdownTests {
    @Test func sigtermUnderContinuousWritersAndNonReadersIsBoundedGracefulAndLosesNoAcknowledgedPut() throws {
        let data = TemporaryDirectory(prefix: "cachet-shutdown")
        defer { data.remove() }
        let timeout = 2.0
        let node = try NodeProcess(arguments: [
            "--data-dir", data.path, "--memory-limit", "64MiB", "--shutdown-timeout", "\(timeout)",
            "--log-level", "info",
        ])
        let large = [UInt8](repeating: 0x33, count: 1 << 20)
        let setup = try node.connect()
        #expect(try setup.roundTrip(.put(key: Array("large".utf8), value: large, ttl: 0)).status == .ok)
        setup.close()

        // Twenty clients that pipeline GETs of the large value and never read.
        var gets: [UInt8] = []
        for id in 0..<50 { gets += CachetCommand.get(key: Array("large".utf8)).encoded(id: UInt32(id)) }
        let nonReaders = try (0..<20).map { _ in try RawClient(port: node.port, sending: gets, receiveBuffer: 4096) }
        defer { for client in nonReaders { client.close() } }

        // Four writers that pipeline PUTs without pause; each records the keys acknowledged.
        let writers = 4
        let outcomes = CachetLock<[WriterOutcome]>([])
        let working = Atomic<Int>(0)
        let group = DispatchGroup()
        for writer in 0..<writers {
            let socket = try node.connect()
            socket.setTimeout(timeout + 5)
            // A thread each: the global queue's few threads would run some writers only after others end.
            group.enter()
            Thread {
                let outcome = runWriter(writer, socket, working: working)
                outcomes.withLock { $0.append(outcome) }
                group.leave()
            }.start()
        }
        // Every writer has had a PUT acknowledged (the disk queue is shared and may make some wait).
        let busy = Date().addingTimeInterval(10)
        while working.load(ordering: .relaxed) < writers && Date() < busy { usleep(10_000) }
        #expect(working.load(ordering: .relaxed) == writers)
        usleep(200_000)
        pump(nonReaders, seconds: 0.1)
        let started = Date()
        let status = node.stop(signal: SIGTERM, timeout: timeout + 10)
        let elapsed = Date().timeIntervalSince(started)
        #expect(status == 0, "the node must exit on its own")
        // The connections are done within the timeout (the node says when); then the disk queue (up to its
        // capacity of writes, each acknowledged) is written out, which takes what the disk takes.
        let line = node.log.split(separator: "\n").first { $0.contains("connections closed") } ?? ""
        let closedAfter = line.range(of: "shutdown.seconds=").flatMap {
            Double(line[$0.upperBound...].prefix { $0 != " " })
        }
        #expect(closedAfter.map { $0 < timeout + 0.5 } == true, "connections closed after \(closedAfter ?? -1) s")
        #expect(elapsed < timeout + 10, "shutdown took \(elapsed) s with --shutdown-timeout \(timeout)")
        #expect(group.wait(timeout: .now() + 10) == .success)

        let results = outcomes.withLock { $0 }
        #expect(results.count == writers)
        for result in results {
            #expect(result.endedWithReset == false, "writer \(result.writer) got a reset instead of FIN")
            #expect(result.error == nil, "writer \(result.writer): \(result.error ?? "")")
            #expect(result.acknowledged.count > 0)
        }

        // Every acknowledged PUT is there after a restart.
        let restarted = try NodeProcess(arguments: ["--data-dir", data.path, "--log-level", "warning"])
        defer { restarted.stop() }
        let client = try restarted.connect()
        var missing = 0
        let keys = results.flatMap(\.acknowledged)
        var start = 0
        while start < keys.count {
            let batch = keys[start..<min(start + 256, keys.count)]
            var requests: [UInt8] = []
            for key in batch { requests += CachetCommand.get(key: Array(key.utf8)).encoded(id: 1) }
            try client.send(requests)
            for key in batch {
                let reply = try client.readResponse()
                if reply.status != .ok || reply.body != Array(key.utf8) { missing += 1 }
            }
            start += batch.count
        }
        #expect(missing == 0, "\(missing) acknowledged PUTs lost")
    }
}

struct WriterOutcome: Sendable {
    var writer: Int
    var acknowledged: [String] = []
    var endedWithReset = false
    var error: String?
}

/// Sends PUTs (key = value) in batches of 16 without waiting, on one thread, while reading replies on
/// another, until the node ends the stream; returns the keys whose PUT was answered OK. Adds 1 to
/// `working` at the first acknowledgement.
func runWriter(_ writer: Int, _ socket: TestSocket, working: borrowing Atomic<Int>) -> WriterOutcome {
    let stop = Atomic<Bool>(false)
    // NSLock and a semaphore rather than `Mutex` and polling `isExecuting`: ThreadSanitizer sees pthread
    // locks and Dispatch, not the standard library's futex-based `Mutex`.
    let sent = NSLockedKeys()
    let senderDone = DispatchSemaphore(value: 0)
    let sender = Thread {
        defer { senderDone.signal() }
        var sequence = 0
        while !stop.load(ordering: .relaxed) {
            var batch: [UInt8] = []
            var keys: [String] = []
            for _ in 0..<16 {
                let key = "w\(writer)-\(sequence)"
                sequence += 1
                keys.append(key)
                batch += CachetCommand.put(key: Array(key.utf8), value: Array(key.utf8), ttl: 0)
                    .encoded(id: UInt32(truncatingIfNeeded: sequence))
            }
            sent.withLock { $0 += keys }
            if (try? socket.send(batch)) == nil { break }
        }
    }
    sender.start()
    var outcome = WriterOutcome(writer: writer)
    var reader = ReplyReader(fd: socket.fd)
    var index = 0
    do {
        while let reply = try reader.next() {
            let key = sent.withLock { index < $0.count ? $0[index] : nil }
            index += 1
            guard let key, reply.status == .ok else {
                outcome.error = "reply \(index) has status \(reply.status) for key \(key ?? "none")"
                break
            }
            outcome.acknowledged.append(key)
            if outcome.acknowledged.count == 1 { working.add(1, ordering: .relaxed) }
        }
    } catch {
        outcome.error = "\(error)"
    }
    outcome.endedWithReset = reader.endedWithReset
    stop.store(true, ordering: .relaxed)
    // Unblocks the sender if it waits in send.
    shutdown(socket.fd, Int32(SHUT_RDWR))
    senderDone.wait()
    socket.close()
    return outcome
}

/// The keys a writer has sent, shared by its sending and reading threads under an `NSLock`.
final class NSLockedKeys: @unchecked Sendable {
    // `@unchecked Sendable`: `keys` is touched only inside `withLock`, under `lock`.
    private let lock = NSLock()
    private var keys: [String] = []

    func withLock<Result>(_ body: (inout [String]) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&keys)
    }
}
