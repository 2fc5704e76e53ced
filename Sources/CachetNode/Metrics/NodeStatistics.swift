import CachetLocking
import CachetStore
import Synchronization

/// The node's counters and the STATS reply built from them. Shared by every loop; thread-safe.
final class NodeStatistics: Sendable {
    let configuration: CachetNodeConfiguration
    let memory: CachetMemoryStore
    let disk: DiskTier?
    let loopCounters: [RequestCounters]
    let membership: CachetNodeMembership
    /// The peers' health, for the members' `state` (set once at start on a node with a cluster file).
    let health = CachetLock<NodeHealth?>(nil)
    /// The owner's hold, for `holding` and `hold_extensions` (set once at start on a node that holds).
    let hold = CachetLock<NodeReturnHold?>(nil)
    /// Warm-up after a membership change, for `warm_up_hits` and `warm_up_misses`.
    let warmUp = CachetLock<NodeWarmUp?>(nil)
    /// The leases of read-through, for `leases_outstanding` (set once at start).
    let leases = CachetLock<NodeLeases?>(nil)
    /// WATCH's hub, for `watchers` and the ring's figures (set once at start).
    let watches = CachetLock<NodeWatchHub?>(nil)
    let connectionsCurrent = Atomic<Int>(0)
    let connectionsTotal = Atomic<Int>(0)
    let connectionsRejected = Atomic<Int>(0)
    /// Responses on the HTTP port, by status.
    let httpResponses = HTTPResponseCounts()
    let startTime: UInt32
    /// The budget of connections' buffers and arriving values, shared by every loop.
    let connectionMemory: ConnectionMemory

    init(configuration: CachetNodeConfiguration, memory: CachetMemoryStore, disk: DiskTier?, loopCount: Int) {
        self.configuration = configuration
        self.memory = memory
        self.disk = disk
        self.loopCounters = (0..<loopCount).map { _ in RequestCounters() }
        self.membership = CachetNodeMembership(configuration: configuration)
        self.startTime = CachetClock.now()
        self.connectionMemory = ConnectionMemory(
            limit: configuration.effectiveConnectionMemoryLimit,
            largestFrame: configuration.maximumPayloadLength + 4 + 64 * 1024
        )
    }

    /// Request counters summed over the loops.
    var requestCounts: RequestCounts {
        var counts = RequestCounts()
        for counters in loopCounters { counts.add(counters) }
        return counts
    }

    /// The STATS reply body: one JSON object of integers and strings. Field meanings are in
    /// `Protocol/PROTOCOL.md`, "STATS".
    /// - Parameter includingMembers: whether to list the cluster's members (`cluster_members`): not to a
    ///   user that is not an admin, on a node with users.
    /// WATCH's figures: watchers, prefixes recorded, changes and bytes in the ring.
    var watchFigures: (watchers: Int, prefixes: Int, changes: Int, bytes: Int) {
        watches.withLock { $0 }?.figures ?? (0, 0, 0, 0)
    }

    func json(includingMembers: Bool = true) -> String {
        let requests = requestCounts
        let memory = memory.statistics
        var fields: [(String, String)] = [
            ("version", "\"\(CachetNodeServer.version)\""),
            ("uptime_seconds", "\(CachetClock.now() &- startTime)"),
            ("items", "\(memory.items)"),
            ("memory_bytes", "\(memory.accountedBytes)"),
            ("memory_payload_bytes", "\(memory.keyValueBytes)"),
            ("memory_limit", "\(memory.memoryLimit)"),
            ("memory_pooled_bytes", "\(memory.pooledBytes)"),
            ("gets", "\(requests.gets)"),
            ("hits", "\(requests.hits)"),
            ("misses", "\(requests.misses)"),
            ("puts", "\(requests.puts)"),
            ("deletes", "\(requests.deletes)"),
            ("bad_requests", "\(requests.badRequests)"),
            ("forwards", "\(requests.forwards)"),
            ("forwards_collapsed", "\(requests.forwardsCollapsed)"),
            ("forward_failures", "\(requests.forwardFailures)"),
            ("routing_disagreements", "\(requests.routingDisagreements)"),
            ("evictions", "\(memory.evictions)"),
            ("expired", "\(memory.expired)"),
            ("connections_current", "\(connectionsCurrent.load(ordering: .relaxed))"),
            ("connections_total", "\(connectionsTotal.load(ordering: .relaxed))"),
            ("connections_rejected", "\(connectionsRejected.load(ordering: .relaxed))"),
            ("leases_outstanding", "\(leases.withLock { $0?.count ?? 0 })"),
            ("stale_items", "\(leases.withLock { $0?.staleCount ?? 0 })"),
            ("watchers", "\(watchFigures.watchers)"),
            ("watch_prefixes", "\(watchFigures.prefixes)"),
            ("watch_buffer_changes", "\(watchFigures.changes)"),
            ("watch_buffer_bytes", "\(watchFigures.bytes)"),
            ("max_connections", "\(configuration.maximumConnections)"),
            ("max_frame", "\(configuration.maximumPayloadLength)"),
            ("large_value_threshold", "\(configuration.largeValueThreshold)"),
            ("io_queues", "\(configuration.ioQueueCount)"),
        ]
        fields += [
            ("connection_memory_bytes", "\(connectionMemory.current)"),
            ("connection_memory_limit", "\(connectionMemory.limit)"),
            ("connections_paused", "\(connectionMemory.paused)"),
            ("connections_evicted", "\(connectionMemory.evicted)"),
        ]
        if let disk {
            let statistics = disk.store.statistics
            fields += [
                ("disk_items", "\(statistics.items)"),
                ("disk_bytes", "\(statistics.bytes)"),
                ("disk_logical_bytes", "\(statistics.logicalBytes)"),
                ("disk_limit", "\(disk.limit)"),
                ("disk_entry_limit", "\(statistics.limit)"),
                ("disk_hits", "\(requests.diskHits)"),
                ("disk_errors", "\(statistics.errors)"),
                ("disk_corrupt", "\(statistics.corrupt)"),
                ("disk_evictions", "\(statistics.evictions)"),
                ("disk_expired", "\(statistics.expired)"),
                ("compression_ratio", Self.decimal(statistics.compressionRatio)),
                ("disk_queue_depth", "\(disk.worker.queueDepth)"),
                ("disk_queue_bytes", "\(disk.worker.queuedBytes)"),
                ("disk_recovering", statistics.recovering ? "true" : "false"),
            ]
            let uploads = disk.uploads.statistics
            fields += [
                ("uploads_in_progress", "\(uploads.inProgress)"),
                ("uploads_staged_bytes", "\(uploads.stagedBytes)"),
                ("uploads_completed", "\(uploads.completed)"),
                ("uploads_abandoned", "\(uploads.abandoned)"),
                ("disk_reads_deferred", "\(disk.readsDeferred.value)"),
            ]
        } else {
            fields.append(("disk_limit", "0"))
        }
        let health = self.health.withLock { $0 }
        fields += membership.statisticsFields { health?.stateAndAnswer(ofID: $0) ?? (.unknown, false) }
            .filter { includingMembers || $0.0 != "cluster_members" }
        fields.append(("cluster_peers_disagreeing", "\(health?.membershipComparison.disagreeingPeers ?? 0)"))
        fields.append(("stand_in_delivery_overdue", "\(health?.overdueDeliveries ?? 0)"))
        let hold = self.hold.withLock { $0 }
        fields.append(("holding", hold?.isHolding() == true ? "true" : "false"))
        fields.append(("hold_extensions", "\(hold?.extensions.load(ordering: .relaxed) ?? 0)"))
        fields.append(("holds_released", "\(hold?.releases.load(ordering: .relaxed) ?? 0)"))
        fields.append(("in_minority", health?.isInMinority == true ? "true" : "false"))
        fields.append(("minority_entries", "\(health?.minorityEntries ?? 0)"))
        fields.append(("minority_misses", "\(requests.minorityMisses)"))
        let warmUp = self.warmUp.withLock { $0 }
        fields.append(("warm_up_hits", "\(warmUp?.hits.load(ordering: .relaxed) ?? 0)"))
        fields.append(("warm_up_misses", "\(warmUp?.misses.load(ordering: .relaxed) ?? 0)"))
        return "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }

    /// A JSON number with three decimals (no exponent, no locale).
    static func decimal(_ value: Double) -> String {
        guard value.isFinite else { return "0" }
        let thousandths = Int((value * 1000).rounded())
        let fraction = abs(thousandths % 1000)
        let padded = fraction < 10 ? "00\(fraction)" : fraction < 100 ? "0\(fraction)" : "\(fraction)"
        return "\(thousandths < 0 ? "-" : "")\(abs(thousandths) / 1000).\(padded)"
    }
}
