import CachetStore
import Synchronization

/// The node's counters and the STATS reply built from them. Shared by every loop; thread-safe.
final class NodeStatistics: Sendable {
    let configuration: CachetNodeConfiguration
    let memory: CachetMemoryStore
    let loopCounters: [RequestCounters]
    let connectionsCurrent = Atomic<Int>(0)
    let connectionsTotal = Atomic<Int>(0)
    let connectionsRejected = Atomic<Int>(0)
    let startTime: UInt32

    init(configuration: CachetNodeConfiguration, memory: CachetMemoryStore, loopCount: Int) {
        self.configuration = configuration
        self.memory = memory
        self.loopCounters = (0..<loopCount).map { _ in RequestCounters() }
        self.startTime = CachetClock.now()
    }

    /// Request counters summed over the loops.
    var requestCounts: RequestCounts {
        var counts = RequestCounts()
        for counters in loopCounters { counts.add(counters) }
        return counts
    }

    /// The STATS reply body: one JSON object of integers and strings. Field meanings are in
    /// `Protocol/PROTOCOL.md`, "STATS".
    func json() -> String {
        let requests = requestCounts
        let memory = memory.statistics
        let fields: [(String, String)] = [
            ("version", "\"\(CachetNodeServer.version)\""),
            ("uptime_seconds", "\(CachetClock.now() &- startTime)"),
            ("items", "\(memory.items)"),
            ("memory_bytes", "\(memory.accountedBytes)"),
            ("memory_payload_bytes", "\(memory.keyValueBytes)"),
            ("memory_limit", "\(memory.memoryLimit)"),
            ("gets", "\(requests.gets)"),
            ("hits", "\(requests.hits)"),
            ("misses", "\(requests.misses)"),
            ("puts", "\(requests.puts)"),
            ("deletes", "\(requests.deletes)"),
            ("bad_requests", "\(requests.badRequests)"),
            ("evictions", "\(memory.evictions)"),
            ("expired", "\(memory.expired)"),
            ("connections_current", "\(connectionsCurrent.load(ordering: .relaxed))"),
            ("connections_total", "\(connectionsTotal.load(ordering: .relaxed))"),
            ("connections_rejected", "\(connectionsRejected.load(ordering: .relaxed))"),
            ("max_connections", "\(configuration.maximumConnections)"),
            ("max_frame", "\(configuration.maximumPayloadLength)"),
            ("io_queues", "\(configuration.ioQueueCount)"),
        ]
        return "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }
}
