import Synchronization

/// Responses sent on the HTTP port, by status code (`/metrics`: `cachet_http_responses_total`), and value
/// responses cut short because the value changed or went away while it was sent
/// (`cachet_http_responses_cut_short_total`). Counted from every loop.
final class HTTPResponseCounts: Sendable {
    /// The status codes counted one by one; any other is counted under `other`.
    static let codes = [200, 206, 304, 400, 401, 403, 404, 405, 416, 431, 500, 503]

    /// One count per code of ``codes``, then `other`: a lock taken once per response (not per request of
    /// the binary protocol).
    private let counts = Mutex([Int](repeating: 0, count: HTTPResponseCounts.codes.count + 1))
    private let cutShort = Atomic<Int>(0)

    /// Counts a response with `status`.
    func count(_ status: Int) {
        let index = Self.codes.firstIndex(of: status) ?? Self.codes.count
        counts.withLock { $0[index] += 1 }
    }

    /// Counts a value response that ended short of its length.
    func countCutShort() {
        cutShort.add(1, ordering: .relaxed)
    }

    /// The counts, by code (`other` for the rest), and the responses cut short.
    var figures: (byCode: [(code: String, count: Int)], cutShort: Int) {
        let counted = counts.withLock { $0 }
        var byCode: [(String, Int)] = []
        for (index, code) in (Self.codes.map(String.init) + ["other"]).enumerated() where counted[index] > 0 {
            byCode.append((code, counted[index]))
        }
        return (byCode, cutShort.load(ordering: .relaxed))
    }
}
