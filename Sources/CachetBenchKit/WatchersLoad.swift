public import CachetIO
import CachetLocking
import CachetWire
import Dispatch
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Watchers beside a load (`cachet-bench --watchers N`): N connections to the first target that WATCH a
/// prefix and read every EVENT, on one thread of their own, so that a run measures what watching costs the
/// writers (with a prefix the load never writes) or how many events a node delivers (with the load's).
public final class WatchersLoad: @unchecked Sendable {
    private let connections: [CachetBlockingConnection]
    private let state = CachetLock((events: 0, gaps: 0, stopped: false))
    private let done = DispatchSemaphore(value: 0)
    private var started: UInt64 = 0

    /// Opens the connections and starts their watches.
    /// - Parameters:
    ///   - target: the node.
    ///   - count: watchers.
    ///   - prefix: what they watch; `{n}` is replaced by each watcher's number.
    ///   - values: whether events carry values.
    ///   - tls: TLS for the connections, if the node is reached over TLS.
    /// - Throws: ``BenchError`` when a connection or a WATCH fails.
    public init(target: BenchTarget, count: Int, prefix: String, values: Bool, tls: CachetTLSConfiguration?)
        throws(BenchError)
    {
        var connections: [CachetBlockingConnection] = []
        do throws(CachetIOError) {
            let context = try tls.map { configuration throws(CachetIOError) in
                try CachetTLSContext(role: .client, configuration: configuration)
            }
            for index in 0..<count {
                let request = CachetWatchRequest(
                    prefix: Array(prefix.replacingOccurrences(of: "{n}", with: "\(index)").utf8),
                    includesValues: values
                )
                let address = CachetAddress(host: target.host, port: target.port)
                let connection: CachetBlockingConnection
                if let context {
                    connection = try CachetBlockingConnection(to: address, timeout: .seconds(5), tls: context)
                } else {
                    connection = try CachetBlockingConnection(to: address, timeout: .seconds(5))
                }
                try connection.send(
                    CachetCommand.watch(request).encoded(id: 1),
                    until: CachetDeadline(after: .seconds(5))
                )
                // The OK reply: 12 bytes of frame and 16 of body.
                while connection.input.readableBytes < 28 {
                    guard try connection.receive(until: CachetDeadline(after: .seconds(5))) > 0 else {
                        throw CachetIOError(code: .connectionClosed, message: "the node closed a watcher's connection")
                    }
                }
                guard connection.input.readableRegion[9] == 0 else {
                    throw CachetIOError(code: .connectionClosed, message: "the node refused WATCH")
                }
                connection.input.moveReadIndex(forwardBy: 28)
                connections.append(connection)
            }
        } catch {
            for connection in connections { connection.close() }
            throw BenchError(.connectionFailed, "watchers: \(error.message)")
        }
        self.connections = connections
    }

    /// Starts reading, on a thread of its own.
    public func start() {
        started = DispatchTime.now().uptimeNanoseconds
        DispatchQueue(label: "cachet.bench.watchers").async { [self] in read() }
    }

    /// Stops reading; returns the events and GAPs received and the seconds since ``start()``.
    public func stop() -> (events: Int, gaps: Int, seconds: Double) {
        state.withLock { $0.stopped = true }
        done.wait()
        for connection in connections { connection.close() }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
        return state.withLock { ($0.events, $0.gaps, seconds) }
    }

    private func read() {
        defer { done.signal() }
        // A connection the node closed is left out (-1).
        var watched = connections.map(\.fd)
        while !state.withLock({ $0.stopped }) {
            let ready = CachetSocket.waitForAny(watched, for: Int16(POLLIN), timeout: .milliseconds(100))
            guard !ready.isEmpty else { continue }
            var events = 0
            var gaps = 0
            for index in ready {
                let connection = connections[index]
                guard (try? connection.receive(until: CachetDeadline(after: .milliseconds(1)))) ?? 0 > 0 else {
                    watched[index] = -1
                    continue
                }
                // Whole frames: count EVENTs (a GAP is kind 6).
                while connection.input.readableBytes >= 12 {
                    let region = connection.input.readableRegion
                    let length = Int(region.loadUnaligned(as: UInt32.self).bigEndian)
                    guard region.count >= 4 + length else { break }
                    if region[5] == CachetOpcode.event.rawValue {
                        events += 1
                        if length > 8, region[12] == CachetEventKind.gap.rawValue { gaps += 1 }
                    }
                    connection.input.moveReadIndex(forwardBy: 4 + length)
                }
            }
            state.withLock {
                $0.events += events
                $0.gaps += gaps
            }
        }
    }
}
