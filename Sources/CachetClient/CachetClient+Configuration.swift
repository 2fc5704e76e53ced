public import CachetIO
import CachetRing

extension CachetClient {
    /// A user of the nodes' auth file and its secret (``Configuration/credentials``). The secret is kept
    /// only to be sent: it is not in the type's description.
    public struct Credentials: Sendable, Hashable, CustomStringConvertible {
        /// The user's name.
        public var user: String
        /// Its secret.
        public var secret: String

        /// Credentials.
        /// - Parameters:
        ///   - user: the user's name.
        ///   - secret: its secret.
        public init(user: String, secret: String) {
            self.user = user
            self.secret = secret
        }

        public var description: String { "Credentials(user: \(user))" }
    }

    /// A node the client talks to: where to connect, and the name the ring places it by.
    public struct Node: Sendable, Hashable, CustomStringConvertible {
        /// The member name the ring places this node by (see `Protocol/RING.md`); `host:port` by default.
        /// Every client and node of a cluster must use the same names.
        public var id: String
        /// A host name, an IPv4 address or an IPv6 address (without brackets).
        public var host: String
        /// The TCP port.
        public var port: Int

        /// Creates a node.
        /// - Parameters:
        ///   - host: a host name or an IP address.
        ///   - port: the TCP port; Cachet's default is 7420.
        ///   - id: the ring member name; `host:port` when nil, as in a cluster file (`Protocol/CLUSTER.md`).
        public init(host: String, port: Int = 7420, id: String? = nil) {
            self.host = host
            self.port = port
            self.id = id ?? "\(host):\(port)"
        }

        /// A node from an address as people write it: `HOST:PORT`, `HOST` (port 7420), `[IPV6]:PORT` or
        /// `[IPV6]`; nil when the port is not a number from 1 to 65535 or the host is empty.
        ///
        /// ```swift
        /// let nodes = "127.0.0.1:7420,127.0.0.1:7421".split(separator: ",").compactMap { CachetClient.Node(address: String($0)) }
        /// ```
        /// - Parameter address: the address.
        public init?(address: String) {
            var host = Substring(address.trimmingPrefixAndSuffix(" "))
            var port = 7420
            if host.hasPrefix("[") {
                guard let close = host.firstIndex(of: "]") else { return nil }
                let rest = host[host.index(after: close)...]
                host = host[host.index(after: host.startIndex)..<close]
                if !rest.isEmpty {
                    guard rest.hasPrefix(":"), let number = Int(rest.dropFirst()) else { return nil }
                    port = number
                }
            } else if host.filter({ $0 == ":" }).count == 1, let colon = host.firstIndex(of: ":") {
                guard let number = Int(host[host.index(after: colon)...]) else { return nil }
                port = number
                host = host[..<colon]
            }
            guard !host.isEmpty, (1...65535).contains(port) else { return nil }
            self.init(host: String(host), port: port)
        }

        /// The node's id.
        public var description: String { id }
    }

    /// What a ``CachetClient`` connects to and how patiently.
    public struct Configuration: Sendable, Hashable {
        /// The nodes, each once; keys are spread over them by the consistent-hash ring.
        public var nodes: [Node]
        /// Points per node on the ring; every client of a cluster must use the same count (see
        /// `Protocol/RING.md`).
        public var virtualNodesPerMember: Int = CachetRing.defaultVirtualNodesPerMember
        /// How long opening a connection may take.
        public var connectTimeout: Duration = .seconds(1)
        /// How long one call may wait for its reply, connection included. No call waits longer than
        /// this (plus a few milliseconds).
        public var requestTimeout: Duration = .seconds(1)
        /// Connections per node. Each carries many requests at once, matched by request id.
        public var connectionsPerNode: Int = 2
        /// Consecutive timeouts after which a node is marked down. A refused connection marks it down at
        /// once.
        public var timeoutsBeforeDown: Int = 3
        /// The first wait before a down node is probed again; it doubles on every failed probe.
        public var probeInitialBackoff: Duration = .milliseconds(100)
        /// The longest wait between two probes of a down node.
        public var probeMaximumBackoff: Duration = .seconds(5)
        /// Whether a key whose owner is down goes to the next node of its preference list (the ring's
        /// stand-in, as the nodes themselves use). When false, such a key fails with `unavailable`.
        public var failover: Bool = true
        /// How long the client's event loop waits for more replies after reading some, before handing its
        /// thread back: while replies keep coming, the kernel wakes that thread directly, which saves a
        /// thread hand-off per reply. Rounded up to whole milliseconds (the loop's unit); at most 2 ms.
        /// Zero turns it off.
        public var eventLoopLinger: Duration = .microseconds(500)
        /// How long a call that is the client's only one in flight may spin (on its own thread, yielding the
        /// core at every turn) for its reply before it suspends. A reply that comes meanwhile goes on the
        /// calling thread at once, with no thread hand-off and no allocation for the wake-up; the price is
        /// that thread's time while it spins, which other tasks could have used. A call spins only while
        /// such calls were answered within half of this on average, and for at most twice that average, so a
        /// far or slow node, or a client with many calls at once, never spins. At most 1 ms; zero turns
        /// spinning off.
        public var maximumSpin: Duration = .microseconds(300)
        /// How often the client asks a node for the cluster's membership and follows it when it changed
        /// (a member added or removed, and the nodes sent SIGHUP): keys go to their owners among the new
        /// members, without a restart. Set to 5 s by ``init(clusterFile:)`` and ``init(membership:)``;
        /// nil (the default for ``init(nodes:)``, whose nodes may be any list) keeps the configured nodes.
        public var membershipRefreshInterval: Duration?
        /// The largest reply payload accepted from a node; larger is a protocol violation. The default is
        /// the protocol's default `--max-frame`.
        public var maximumFrameLength: Int = 64 << 20
        /// The user every connection authenticates as (AUTH, before any request) on nodes started with
        /// `--auth-file`; nil (the default): none. A refused AUTH fails the connection's requests with
        /// ``CachetClientError/Code/notAuthenticated``; a request the user may not send fails with
        /// ``CachetClientError/Code/forbidden``.
        public var credentials: Credentials?
        /// TLS for every connection (the nodes' `--tls-port`s as the nodes' ports): the CA the nodes'
        /// certificates chain to, a client certificate and key for nodes that require one, and the name
        /// their certificates must carry (nil: the certificate must chain to the CA, any name). The files
        /// are read when the client is created. Nil (the default): plain TCP.
        public var tls: CachetTLSConfiguration?

        /// Creates a configuration of the given nodes with default timeouts.
        /// - Parameter nodes: the nodes, each once.
        public init(nodes: [Node]) {
            self.nodes = nodes
        }

        /// Checks the values.
        /// - Throws: ``CachetClientError`` with code `invalidConfiguration` naming the field at fault.
        public func validate() throws(CachetClientError) {
            func fail(_ text: String) -> CachetClientError {
                CachetClientError(code: .invalidConfiguration, message: text)
            }
            guard !nodes.isEmpty else {
                throw fail("no nodes configured: give at least one, such as .init(host: \"127.0.0.1\", port: 7420)")
            }
            var seen = Set<String>()
            for node in nodes {
                guard !node.host.isEmpty else { throw fail("node \(node.id) has an empty host") }
                guard (1...65535).contains(node.port) else {
                    throw fail("node \(node.id) has port \(node.port): give a port between 1 and 65535")
                }
                guard seen.insert(node.id).inserted else {
                    throw fail("node \(node.id) is listed twice: list every node once")
                }
            }
            guard CachetRing.virtualNodesPerMemberRange.contains(virtualNodesPerMember) else {
                throw fail("virtualNodesPerMember \(virtualNodesPerMember) is not between 1 and 4096")
            }
            for (name, value) in [
                ("connectTimeout", connectTimeout), ("requestTimeout", requestTimeout),
                ("probeInitialBackoff", probeInitialBackoff), ("probeMaximumBackoff", probeMaximumBackoff),
            ] where value <= .zero || value > .seconds(3600) {
                throw fail("\(name) \(value) must be more than zero and at most an hour")
            }
            guard (1...64).contains(connectionsPerNode) else {
                throw fail("connectionsPerNode \(connectionsPerNode) is not between 1 and 64")
            }
            guard eventLoopLinger >= .zero && eventLoopLinger <= .milliseconds(2) else {
                throw fail("eventLoopLinger \(eventLoopLinger) must be between zero and 2 ms")
            }
            guard maximumSpin >= .zero && maximumSpin <= .milliseconds(1) else {
                throw fail("maximumSpin \(maximumSpin) must be between zero and 1 ms")
            }
            if let interval = membershipRefreshInterval, interval <= .zero {
                throw fail(
                    "membershipRefreshInterval \(interval) must be positive, or nil to keep the configured nodes"
                )
            }
            guard timeoutsBeforeDown >= 1 else { throw fail("timeoutsBeforeDown must be at least 1") }
            guard maximumFrameLength >= 1 << 16 && maximumFrameLength <= Int(UInt32.max) else {
                throw fail("maximumFrameLength \(maximumFrameLength) is not between 65536 and 4294967295")
            }
        }
    }
}

extension String {
    /// The string without leading and trailing `character`s.
    fileprivate func trimmingPrefixAndSuffix(_ character: Character) -> Substring {
        var text = self[...]
        while text.first == character { text = text.dropFirst() }
        while text.last == character { text = text.dropLast() }
        return text
    }
}
