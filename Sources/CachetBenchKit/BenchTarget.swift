/// A server to load, as an IPv4 address (or `localhost`) and a port.
public struct BenchTarget: Hashable, Sendable, CustomStringConvertible {
    /// The address.
    public var host: String
    /// The TCP port.
    public var port: Int

    /// Creates a target.
    /// - Parameters:
    ///   - host: an IPv4 address or `localhost`.
    ///   - port: the TCP port.
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// `host:port`.
    public var description: String { "\(host):\(port)" }

    /// Parses a cluster file: one `host:port` per line; blank lines and lines starting with `#` are skipped.
    /// - Parameter text: the file's contents.
    /// - Returns: the targets in file order.
    /// - Throws: ``BenchError`` naming the first bad line by number.
    public static func parseList(_ text: String) throws(BenchError) -> [BenchTarget] {
        var targets: [BenchTarget] = []
        for (number, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated()
        {
            let line = rawLine.filter { $0 != " " && $0 != "\t" && $0 != "\r" }
            if line.isEmpty || line.hasPrefix("#") { continue }
            let parts = line.split(separator: ":")
            guard parts.count == 2, let port = Int(parts[1]), (1...65535).contains(port), !parts[0].isEmpty else {
                throw BenchError(.invalidConfiguration, "line \(number + 1) '\(line)' is not host:port")
            }
            targets.append(BenchTarget(host: String(parts[0]), port: port))
        }
        guard !targets.isEmpty else { throw BenchError(.invalidConfiguration, "the cluster file names no server") }
        return targets
    }
}
