public import CachetCluster
import CachetLocking
import Dispatch
public import Logging
import Synchronization

/// The cluster a running node belongs to: its own id, the current membership, and the reloading of the
/// cluster file on SIGHUP. Shared by STATS and (later) routing; thread-safe.
///
/// A node started without a cluster file is a cluster of one: a single member named by `--node-id`, or by
/// `HOST:PORT` once it listens. A node started with one (`--cluster FILE --node-id ID`) re-reads FILE on
/// ``reload(logger:)``; a file that cannot be read, is not a valid cluster, or no longer lists this node's
/// id is refused and the old membership kept. See `Protocol/CLUSTER.md`.
public final class CachetNodeMembership: Sendable {
    /// This node's id.
    public var nodeID: String { state.withLock { $0.nodeID } }
    /// The cluster file, or `nil` for a cluster of one.
    public let file: String?

    private let state: CachetLock<State>
    /// Bumped each time the membership in force changes, so that a loop's routing snapshot can tell it
    /// is out of date with one relaxed load per request.
    private let changeCount = Atomic<Int>(0)

    /// How many times the membership in force has changed since start.
    var generation: Int { changeCount.load(ordering: .acquiring) }

    private struct State {
        var nodeID: String
        var membership: CachetMembership
        var reloads = 0
        var reloadFailures = 0
        /// Whether the node id was derived from the listening address (a cluster of one without `--node-id`).
        var idFromAddress: Bool
        /// The membership before the last change, and when it changed (uptime nanoseconds).
        var previous: (membership: CachetMembership, changedAt: UInt64)?
    }

    /// Creates the holder from a node's configuration.
    /// - Parameter configuration: a configuration that passed `validate()`: with a cluster file it holds
    ///   the membership read from it and a node id that is a member.
    init(configuration: CachetNodeConfiguration) {
        if let cluster = configuration.cluster, let id = configuration.nodeID {
            file = cluster.file
            state = CachetLock(State(nodeID: id, membership: cluster.membership, idFromAddress: false))
        } else {
            file = nil
            let id =
                configuration.nodeID
                ?? CachetClusterMember.defaultID(host: configuration.host, port: configuration.port)
            state = CachetLock(
                State(
                    nodeID: id,
                    membership: Self.single(id: id, host: configuration.host, port: configuration.port),
                    idFromAddress: configuration.nodeID == nil
                )
            )
        }
    }

    /// The membership in force.
    public var current: CachetMembership { state.withLock { $0.membership } }

    /// The membership in force before the last change, and when it changed (uptime nanoseconds); nil before
    /// any change.
    var previous: (membership: CachetMembership, changedAt: UInt64)? { state.withLock { $0.previous } }

    /// This node's id and the membership in force, read together.
    func snapshot() -> (nodeID: String, membership: CachetMembership) {
        state.withLock { ($0.nodeID, $0.membership) }
    }

    /// Successful reloads of the cluster file since start.
    public var reloadCount: Int { state.withLock { $0.reloads } }
    /// Reloads refused since start (the old membership was kept).
    public var reloadFailureCount: Int { state.withLock { $0.reloadFailures } }

    /// Records the port a cluster of one listens on, once known (it is 0 in the configuration with
    /// `--port 0`). Does nothing for a node with a cluster file, whose address is the file's.
    /// - Parameters:
    ///   - host: the address the node listens on.
    ///   - port: the bound port.
    public func listening(host: String, port: Int) {
        guard file == nil else { return }
        state.withLock { state in
            if state.idFromAddress { state.nodeID = CachetClusterMember.defaultID(host: host, port: port) }
            state.membership = Self.single(id: state.nodeID, host: host, port: port)
        }
        changeCount.add(1, ordering: .releasing)
    }

    /// Re-reads the cluster file and puts it in force if it is a valid cluster that still lists this node.
    /// Logs what changed, or why the file was refused.
    /// - Parameter logger: where to log the outcome.
    /// - Returns: what changed, or `nil` when the file was refused or the node has no cluster file.
    @discardableResult
    public func reload(logger: Logger) -> CachetMembershipChanges? {
        guard let file else {
            logger.info("SIGHUP ignored: the node was started without --cluster, so it has no file to re-read")
            return nil
        }
        let loaded: CachetMembership
        let me: CachetClusterMember
        let id = nodeID
        do throws(CachetClusterError) {
            loaded = try CachetMembership(contentsOfFile: file)
            me = try loaded.requireMember(id: id)
        } catch {
            let count = state.withLock { state in
                state.reloadFailures += 1
                return state.reloadFailures
            }
            let reason =
                error.code == .unknownMember
                ? "cluster file \(file) no longer lists this node: \(error.message)" : error.message
            logger.error(
                "cluster file refused; keeping the old membership",
                metadata: [
                    "cluster.file": "\(file)", "error.code": "\(error.code)", "error.message": "\(reason)",
                    "cluster.hash": "\(current.membershipHashText)", "cluster.reload_failures": "\(count)",
                ]
            )
            return nil
        }
        let old = state.withLock { state in
            let old = state.membership
            state.membership = loaded
            state.reloads += 1
            if loaded.membershipHashText != old.membershipHashText {
                state.previous = (old, DispatchTime.now().uptimeNanoseconds)
            }
            return old
        }
        changeCount.add(1, ordering: .releasing)
        let changes = loaded.changes(since: old)
        if changes.isEmpty {
            logger.info(
                "cluster file reloaded; membership unchanged",
                metadata: ["cluster.file": "\(file)", "cluster.hash": "\(loaded.membershipHashText)"]
            )
        } else {
            logger.notice(
                "cluster membership changed",
                metadata: [
                    "cluster.file": "\(file)", "cluster.changes": "\(changes)",
                    "cluster.old_hash": "\(old.membershipHashText)", "cluster.hash": "\(loaded.membershipHashText)",
                    "cluster.members": "\(loaded.members.count)",
                ]
            )
        }
        if changes.moved.contains(where: { $0.id == id }) {
            logger.warning(
                "this node's address in the cluster file changed; it keeps listening where it was started until restarted",
                metadata: ["node.id": "\(id)", "cluster.address": "\(me.address)"]
            )
        }
        return changes
    }

    /// The STATS fields of the cluster, as (name, JSON value) pairs: `node_id`, `cluster_hash`,
    /// `cluster_virtual_nodes`, `cluster_file`, `cluster_reloads`, `cluster_reload_failures` and
    /// `cluster_members` (see `Protocol/PROTOCOL.md`, "STATS").
    func statisticsFields(
        stateOf peerState: (String) -> (state: CachetClusterMemberState, answered: Bool)
    ) -> [(String, String)] {
        let (id, membership, reloads, failures, previous) = state.withLock {
            ($0.nodeID, $0.membership, $0.reloads, $0.reloadFailures, $0.previous)
        }
        var members = "["
        for (index, member) in membership.members.enumerated() {
            let (state, answered) = member.id == id ? (.local, true) : peerState(member.id)
            if index > 0 { members += "," }
            members += "{\"id\":\(Self.quoted(member.id)),\"host\":\(Self.quoted(member.host)),"
            members += "\"port\":\(member.port),\"state\":\(Self.quoted(state.rawValue)),\"answered\":\(answered)}"
        }
        members += "]"
        return [
            ("node_id", Self.quoted(id)),
            ("cluster_hash", Self.quoted(membership.membershipHashText)),
            ("cluster_virtual_nodes", "\(membership.virtualNodesPerMember)"),
            ("cluster_file", Self.quoted(file ?? "")),
            ("cluster_reloads", "\(reloads)"),
            ("cluster_reload_failures", "\(failures)"),
            ("cluster_members", members),
        ] + Self.changeFields(previous)
    }

    /// What a peer warming up after a membership change needs to know of this node's last change
    /// (`Protocol/CLUSTER.md`, "Warm-up after a membership change"): the hash of the membership before it
    /// (`cluster_previous_hash`) and how long ago it was (`cluster_changed_ms_ago`); nothing before any
    /// change.
    private static func changeFields(_ previous: (membership: CachetMembership, changedAt: UInt64)?) -> [(
        String, String
    )] {
        guard let previous else { return [] }
        let elapsed = DispatchTime.now().uptimeNanoseconds &- previous.changedAt
        return [
            ("cluster_previous_hash", quoted(previous.membership.membershipHashText)),
            ("cluster_changed_ms_ago", "\(elapsed / 1_000_000)"),
        ]
    }

    /// The membership of a cluster of one. Its id and host are checked by the configuration; a port of 0
    /// (not bound yet) is shown as 1 until ``listening(host:port:)`` replaces it.
    private static func single(id: String, host: String, port: Int) -> CachetMembership {
        let member = CachetClusterMember(id: id, host: host, port: port)
        if let membership = try? CachetMembership(members: [member]) { return membership }
        // Only a port of 0 (or an id the configuration would have refused) gets here.
        var placeholder = member
        placeholder.port = 1
        if let membership = try? CachetMembership(members: [placeholder]) { return membership }
        placeholder.host = "127.0.0.1"
        placeholder.id = "127.0.0.1:1"
        return try! CachetMembership(members: [placeholder])
    }

    /// `text` as a JSON string.
    static func quoted(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    let digits = String(scalar.value, radix: 16)
                    result += "\\u" + String(repeating: "0", count: 4 - digits.count) + digits
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result + "\""
    }
}
