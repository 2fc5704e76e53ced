/// Builds Prometheus's text format, one family at a time.
struct PrometheusText {
    private(set) var output = ""

    mutating func gauge(_ name: String, _ help: String, _ value: Int) {
        family(name, help, "gauge", [("", value)])
    }

    mutating func gauge(_ name: String, _ help: String, _ samples: [(labels: String, value: Int)]) {
        family(name, help, "gauge", samples)
    }

    mutating func counter(_ name: String, _ help: String, _ value: Int) {
        family(name, help, "counter", [("", value)])
    }

    mutating func counter(_ name: String, _ help: String, _ samples: [(labels: String, value: Int)]) {
        family(name, help, "counter", samples)
    }

    /// A histogram per label set: cumulative `_bucket`s with `le` (in seconds), `_sum` and `_count`.
    mutating func histogram(_ name: String, _ help: String, _ samples: [(labels: String, histogram: LatencyHistogram)])
    {
        output += "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        for (labels, histogram) in samples {
            var cumulative = 0
            for (bucket, count) in histogram.buckets.enumerated() {
                cumulative += count
                let bound =
                    bucket < RequestLatencies.bounds.count
                    ? Self.seconds(fromNanoseconds: Int(RequestLatencies.bounds[bucket])) : "+Inf"
                output += "\(name)_bucket{\(labels),le=\"\(bound)\"} \(cumulative)\n"
            }
            output += "\(name)_sum{\(labels)} \(Self.seconds(fromNanoseconds: histogram.sumNanoseconds))\n"
            output += "\(name)_count{\(labels)} \(cumulative)\n"
        }
    }

    /// Nanoseconds as seconds in decimal, exactly (no floating point): 25000 is "0.000025".
    static func seconds(fromNanoseconds nanoseconds: Int) -> String {
        let whole = nanoseconds / 1_000_000_000
        var fraction = String(nanoseconds % 1_000_000_000)
        fraction = String(repeating: "0", count: 9 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return fraction.isEmpty ? "\(whole)" : "\(whole).\(fraction)"
    }

    private mutating func family(
        _ name: String,
        _ help: String,
        _ type: String,
        _ samples: [(labels: String, value: Int)]
    ) {
        output += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        for (labels, value) in samples {
            output += labels.isEmpty ? "\(name) \(value)\n" : "\(name){\(labels)} \(value)\n"
        }
    }
}
