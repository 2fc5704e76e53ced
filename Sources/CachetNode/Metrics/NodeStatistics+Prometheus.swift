import CachetCluster
import CachetStore

/// The node's figures for a metrics scraper (`docs/operating.md`, "Metrics and health"): the same counters
/// as STATS, in Prometheus's text format, named as memcached_exporter names memcached's (`cachet_` for
/// `memcached_`), so that dashboards and alerts carry over; and readiness for a load balancer or
/// Kubernetes. Read at scrape time from the counters the loops keep: nothing on the request path.
extension NodeStatistics {
    /// Prometheus's text exposition format (version 0.0.4): `# HELP`, `# TYPE` and samples.
    func prometheusText() -> String {
        var text = PrometheusText()
        let requests = requestCounts
        let memory = memory.statistics
        text.gauge("cachet_up", "Whether the node answers (always 1 when scraped).", 1)
        text.gauge("cachet_uptime_seconds", "Seconds since the node started.", Int(CachetClock.now() &- startTime))
        text.gauge("cachet_current_items", "Live entries in the memory tier.", memory.items)
        text.gauge("cachet_current_bytes", "Bytes the memory tier holds, overhead included.", memory.accountedBytes)
        text.gauge("cachet_limit_bytes", "The memory tier's limit (--memory-limit).", memory.memoryLimit)
        text.counter(
            "cachet_commands_total",
            "Requests served, by command and outcome.",
            [
                (#"command="get",status="hit""#, requests.hits),
                (#"command="get",status="miss""#, requests.misses),
                (#"command="set",status="ok""#, requests.puts),
                (#"command="delete",status="ok""#, requests.deletes),
            ]
        )
        text.histogram(
            "cachet_request_duration_seconds",
            "Requests by command, from the turn that read them to their reply handed to the socket.",
            LatencyCommand.allCases.map { command in
                var histogram = LatencyHistogram()
                for counters in loopCounters { counters.latencies.add(command, to: &histogram) }
                return (#"command=""# + command.label + #"""#, histogram)
            }
        )
        text.counter("cachet_bad_requests_total", "Requests refused as malformed.", requests.badRequests)
        let watchFigures = watchFigures
        text.gauge("cachet_watchers", "Connections watching changes (WATCH).", watchFigures.watchers)
        text.gauge("cachet_watch_buffer_bytes", "Bytes of recent changes kept for watchers.", watchFigures.bytes)
        text.counter("cachet_items_evicted_total", "Entries evicted from the memory tier.", memory.evictions)
        text.counter("cachet_items_expired_total", "Entries dropped from memory once their TTL passed.", memory.expired)
        text.gauge(
            "cachet_current_connections",
            "Client connections open now.",
            connectionsCurrent.load(ordering: .relaxed)
        )
        text.counter(
            "cachet_connections_total",
            "Client connections accepted.",
            connectionsTotal.load(ordering: .relaxed)
        )
        text.counter(
            "cachet_connections_rejected_total",
            "Connections answered UNAVAILABLE past --max-connections.",
            connectionsRejected.load(ordering: .relaxed)
        )
        text.gauge(
            "cachet_max_connections",
            "The connection limit (--max-connections).",
            configuration.maximumConnections
        )
        let http = httpResponses.figures
        if !http.byCode.isEmpty {
            text.counter(
                "cachet_http_responses_total",
                "Responses on the HTTP port (--http-port, --https-port), by status code.",
                http.byCode.map { (#"code=""# + $0.code + #"""#, $0.count) }
            )
            text.counter(
                "cachet_http_responses_cut_short_total",
                "Value responses ended short of their length: the value was replaced or went away while sent.",
                http.cutShort
            )
        }
        text.gauge("cachet_connection_memory_bytes", "Bytes held by connections' buffers.", connectionMemory.current)
        text.counter(
            "cachet_connections_evicted_total",
            "Connections closed for holding memory others waited for.",
            connectionMemory.evicted
        )
        if let disk {
            let statistics = disk.store.statistics
            text.gauge("cachet_disk_items", "Entries in the disk tier.", statistics.items)
            text.gauge("cachet_disk_bytes", "Bytes of entry files on disk.", statistics.bytes)
            text.gauge("cachet_disk_limit_bytes", "The disk tier's whole footprint (--disk-limit).", disk.limit)
            text.counter("cachet_disk_hits_total", "GETs answered from the disk tier.", requests.diskHits)
            text.counter("cachet_disk_evictions_total", "Entries evicted from the disk tier.", statistics.evictions)
            text.counter("cachet_disk_errors_total", "Disk operations that failed.", statistics.errors)
            text.counter("cachet_disk_corrupt_total", "Entry files found corrupt (never served).", statistics.corrupt)
            text.gauge("cachet_disk_queue_depth", "Disk writes queued and not yet applied.", disk.worker.queueDepth)
            let uploads = disk.uploads.statistics
            text.gauge("cachet_uploads_in_progress", "Values being received in parts.", uploads.inProgress)
            text.counter("cachet_uploads_completed_total", "Values received in parts and stored.", uploads.completed)
            text.counter(
                "cachet_uploads_abandoned_total",
                "Uploads given up: their connection closed, no part came in time, or a part was refused.",
                uploads.abandoned
            )
            text.gauge(
                "cachet_disk_recovering",
                "1 while the disk index is rebuilt at start.",
                statistics.recovering ? 1 : 0
            )
        }
        text.counter("cachet_forwards_total", "Requests forwarded to another member.", requests.forwards)
        text.counter("cachet_forward_failures_total", "Forwards answered UNAVAILABLE.", requests.forwardFailures)
        text.counter(
            "cachet_routing_disagreements_total",
            "Forwarded requests for a key this node routes elsewhere.",
            requests.routingDisagreements
        )
        let health = self.health.withLock { $0 }
        let hold = self.hold.withLock { $0 }
        let outcomes = health?.forwardOutcomes ?? [:]
        if !outcomes.isEmpty {
            var samples: [(String, Int)] = []
            for member in outcomes.keys.sorted() {
                for (outcome, count) in outcomes[member, default: [:]].sorted(by: { $0.key < $1.key }) {
                    samples.append(("member=\"\(Self.escaped(member))\",outcome=\"\(outcome)\"", count))
                }
            }
            text.counter(
                "cachet_forward_outcomes_total",
                "Forwards and probes to each peer, by outcome (answered, timed_out, refused...).",
                samples
            )
        }
        let nodeID = membership.nodeID
        let members = membership.current.members.map(\.id)
        if members.count > 1 {
            var states: [(String, Int)] = []
            for member in members where member != nodeID {
                let state = health?.stateAndAnswer(ofID: member).state ?? .unknown
                for name in ["up", "suspect", "down"] {
                    states.append(
                        ("member=\"\(Self.escaped(member))\",state=\"\(name)\"", state.rawValue == name ? 1 : 0)
                    )
                }
            }
            text.gauge(
                "cachet_cluster_member_state",
                "Each peer's state in this node's view (1 for its state).",
                states
            )
        }
        text.gauge(
            "cachet_holding",
            "1 while the node holds its own keys after an absence.",
            hold?.isHolding() == true ? 1 : 0
        )
        text.counter(
            "cachet_holds_released_total",
            "Holds that ended before their period because every peer cleared them.",
            hold?.releases.load(ordering: .relaxed) ?? 0
        )
        text.gauge(
            "cachet_in_minority",
            "1 while the node reaches fewer than a majority of the members.",
            health?.isInMinority == true ? 1 : 0
        )
        text.counter(
            "cachet_stand_in_deliveries_overdue_total",
            "Deliveries to a returned owner that outlasted its hold.",
            health?.overdueDeliveries ?? 0
        )
        let warmUp = self.warmUp.withLock { $0 }
        text.counter(
            "cachet_warm_up_hits_total",
            "Misses answered by a key's previous owner.",
            warmUp?.hits.load(ordering: .relaxed) ?? 0
        )
        text.counter(
            "cachet_warm_up_misses_total",
            "Warm-up requests that found nothing.",
            warmUp?.misses.load(ordering: .relaxed) ?? 0
        )
        return text.output
    }

    /// Whether the node serves its keys now, and why not: it holds after an absence, it reaches fewer than
    /// a majority of the members, or its disk index is still being rebuilt.
    func readiness() -> (ready: Bool, reason: String) {
        if self.hold.withLock({ $0 })?.isHolding() == true {
            return (false, "holding its keys after an absence (stand-ins may still tell it what they wrote)")
        }
        if self.health.withLock({ $0 })?.isInMinority == true {
            return (false, "in the minority: it reaches fewer than a majority of the cluster's members")
        }
        if disk?.store.statistics.recovering == true {
            return (false, "the disk tier's index is being rebuilt")
        }
        return (true, "serving")
    }

    /// A label value with Prometheus's escapes.
    static func escaped(_ value: String) -> String {
        var escaped = ""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
