import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Why a ``NetworkNamespaceLab`` could not be built or changed.
public struct NetworkNamespaceLabError: Error, CustomStringConvertible {
    /// What kind of failure it is.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: Hashable, Sendable {
            case unavailable
            case commandFailed
        }
        private let value: Value

        /// Network namespaces cannot be made here: not root, no `ip`, or no `CAP_SYS_ADMIN` (a container).
        /// A test skips on this one.
        public static let unavailable = Code(value: .unavailable)
        /// An `ip` command failed or hung after the first namespace was made: a real failure.
        public static let commandFailed = Code(value: .commandFailed)

        public var description: String { value == .unavailable ? "unavailable" : "commandFailed" }
    }

    /// What kind of failure it is.
    public var code: Code
    /// What failed, with the command and what it printed.
    public var message: String

    public var description: String { "network namespace lab (\(code)): \(message)" }
}

/// A private IPv4 network of Linux network namespaces for tests that cut a process off the network for real.
///
/// The topology, built with iproute2's `ip` (root only; no iptables):
///
/// ```
///  host namespace (the test)          hub namespace                 one namespace per host
///  <prefix>h 10.213.X.254/24 ---veth--- <prefix>g ┐
///                                                 bridge <prefix>b
///                                      <prefix>p1 ┤ ---veth--- lab0 10.213.X.1/24   (host 1)
///                                      <prefix>p2 ┤ ---veth--- lab0 10.213.X.2/24   (host 2)
///                                      <prefix>p3 ┘ ---veth--- lab0 10.213.X.3/24   (host 3)
/// ```
///
/// `prefix` is `cpt`, the test process's pid and a letter counting the labs of the process (a to z, then
/// again), so that labs at the same time do not meet, and every interface name stays within Linux's 15
/// bytes. `X` is picked so that no route of the host namespace covers `10.213.X.0/24` yet: the subnet
/// exists only inside the lab, the hosts' namespaces have no other route (no default route), and nothing
/// leaves it. Every namespace knows every lab address's MAC as a permanent
/// neighbour, so that a cut-off host never turns into "no route to host" after ARP gives up: its packets
/// are dropped, and a connection to it or from it times out.
///
/// ``cutOff(_:)`` detaches a host's port from the bridge (`ip link set <prefix>pN nomaster`): the port and
/// the host's own interface stay up (the host sees no carrier loss), but what it sends reaches no one and
/// nothing reaches it, so a connect to it times out rather than being refused, and the connections open
/// to it or from it stall. (Setting the hub's end down would cut it off too, but the host would see its link
/// go down: `NO-CARRIER`.) ``reconnect(_:)`` attaches the port again.
///
/// Run a program inside a host's namespace with ``launcher(for:)`` (`ip netns exec NS`: the program is
/// exec'd, so its pid is the launched process's). ``remove()``, also run on release, kills every process
/// left in the lab's namespaces and deletes them; ``init(hosts:)`` first removes what a crashed earlier run
/// left (namespaces and devices named `cpt<pid>…` of a pid that no longer runs, or with this lab's prefix).
///
/// Not thread-safe: one test uses it from one thread.
public final class NetworkNamespaceLab {
    /// One host of the lab: a namespace with an address on the lab's subnet.
    public struct Host: Sendable {
        /// The network namespace (`ip netns`).
        public let namespace: String
        /// The host's IPv4 address.
        public let address: String
        /// The hub's end of the host's veth pair: the bridge port ``cutOff(_:)`` detaches.
        public let port: String
    }

    /// The start of every namespace and device name: `cpt`, the pid and a letter.
    public let prefix: String
    /// The lab's /24, as its first three octets (`10.213.X`).
    public let subnet: String
    /// The test process's address in the lab (the host namespace's end of its veth).
    public let hostAddress: String
    /// The hosts, numbered from 1 in their addresses (`10.213.X.1`, ...).
    public let hosts: [Host]
    private let hub: String
    private let bridge: String
    private let hostDevice: String
    private var removed = false

    /// Labs made by this process so far, for the letter of the next one's prefix.
    private static let made = Atomic<Int>(0)

    /// The path of `ip`, if installed.
    public static let ipPath: String? = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    /// Why no lab can be built here, as far as can be told without trying (not root, no `ip`); nil when
    /// it may be. Creating a namespace can still fail (a container without `CAP_SYS_ADMIN`): ``init(hosts:)``
    /// then throws ``NetworkNamespaceLabError/Code/unavailable``.
    public static var unavailableReason: String? {
        if getuid() != 0 { return "network namespaces need root" }
        if ipPath == nil { return "iproute2's ip is not installed" }
        return nil
    }

    /// Builds the lab: a hub namespace with a bridge, `hosts` namespaces each with a veth into it, and a
    /// veth from the host namespace into it.
    /// - Parameter count: how many hosts (1 to 99).
    /// - Throws: ``NetworkNamespaceLabError``: `unavailable` when namespaces cannot be made here (the first
    ///   `ip netns add` failed), `commandFailed` for any later failure (what was built is removed first).
    public init(hosts count: Int) throws {
        precondition((1...99).contains(count), "a lab has 1 to 99 hosts")
        if let reason = Self.unavailableReason {
            throw NetworkNamespaceLabError(code: .unavailable, message: reason)
        }
        let pid = getpid()
        let letter = Character(
            UnicodeScalar(UInt8(ascii: "a") + UInt8(Self.made.add(1, ordering: .relaxed).oldValue % 26))
        )
        prefix = "cpt\(pid)\(letter)"
        hub = "\(prefix)-hub"
        bridge = "\(prefix)b"
        hostDevice = "\(prefix)h"
        Self.removeLeftovers(prefix: prefix)
        let octet = try Self.freeSubnetOctet(startingAt: 16 + Int(pid % 224))
        let prefix = prefix
        subnet = "10.213.\(octet)"
        hostAddress = "10.213.\(octet).254"
        hosts = (1...count).map { index in
            Host(namespace: "\(prefix)-\(index)", address: "10.213.\(octet).\(index)", port: "\(prefix)p\(index)")
        }
        do {
            try Self.ip(["netns", "add", hub])
        } catch {
            // A leftover of the same name is a failure of the cleanup, not of the machine.
            if error.message.contains("File exists") { throw error }
            throw NetworkNamespaceLabError(
                code: .unavailable,
                message: "cannot create a network namespace (is CAP_SYS_ADMIN missing?): \(error.message)"
            )
        }
        do {
            try build(octet: octet)
        } catch {
            remove()
            throw error
        }
    }

    private func build(octet: Int) throws(NetworkNamespaceLabError) {
        // Locally administered MACs, one per address, so that every neighbour entry can be permanent.
        func mac(_ last: Int) -> String { String(format: "02:cf:%02x:00:00:%02x", octet, last) }
        try Self.ip(["-n", hub, "link", "set", "lo", "up"])
        try Self.ip(["-n", hub, "link", "add", bridge, "type", "bridge"])
        try Self.ip(["-n", hub, "link", "set", bridge, "up"])
        var neighbours: [(address: String, mac: String)] = [(hostAddress, mac(254))]
        for (index, host) in hosts.enumerated() {
            let number = index + 1
            try Self.ip(["netns", "add", host.namespace])
            try Self.ip(["-n", host.namespace, "link", "set", "lo", "up"])
            try Self.ip([
                "link", "add", host.port, "netns", hub, "type", "veth",
                "peer", "name", "lab0", "netns", host.namespace, "address", mac(number),
            ])
            try Self.ip(["-n", hub, "link", "set", host.port, "master", bridge, "up"])
            try Self.ip(["-n", host.namespace, "addr", "add", "\(host.address)/24", "dev", "lab0"])
            try Self.ip(["-n", host.namespace, "link", "set", "lab0", "up"])
            neighbours.append((host.address, mac(number)))
        }
        try Self.ip([
            "link", "add", hostDevice, "address", mac(254), "type", "veth", "peer", "name", "\(prefix)g", "netns", hub,
        ])
        try Self.ip(["-n", hub, "link", "set", "\(prefix)g", "master", bridge, "up"])
        try Self.ip(["addr", "add", "\(hostAddress)/24", "dev", hostDevice])
        try Self.ip(["link", "set", hostDevice, "up"])
        for (namespace, device) in [(nil, hostDevice)] + hosts.map({ ($0.namespace, "lab0") }) {
            let own = namespace.map { ns in hosts.first { $0.namespace == ns }!.address } ?? hostAddress
            for neighbour in neighbours where neighbour.address != own {
                try Self.ip(
                    (namespace.map { ["-n", $0] } ?? [])
                        + [
                            "neigh", "replace", neighbour.address, "lladdr", neighbour.mac, "dev", device, "nud",
                            "permanent",
                        ]
                )
            }
        }
    }

    /// The host with this number (from 1, as in its address).
    /// - Parameter number: 1 to the number of hosts.
    /// - Returns: the host.
    public func host(_ number: Int) -> Host { hosts[number - 1] }

    /// The command that runs a program inside a host's namespace: put the program and its arguments after it.
    /// - Parameter number: the host's number.
    /// - Returns: `ip netns exec NAMESPACE`.
    public func launcher(for number: Int) -> [String] {
        [Self.ipPath ?? "ip", "netns", "exec", host(number).namespace]
    }

    /// Cuts a host off: its bridge port is detached, so no packet reaches it or leaves it, silently (no
    /// refusal, no carrier loss); connections to it and from it time out.
    /// - Parameter number: the host's number.
    /// - Throws: ``NetworkNamespaceLabError`` `commandFailed`.
    public func cutOff(_ number: Int) throws {
        try Self.ip(["-n", hub, "link", "set", host(number).port, "nomaster"])
    }

    /// Reconnects a host cut off by ``cutOff(_:)``: its port joins the bridge again (forwarding at once: the
    /// bridge runs no spanning tree). Connections that stalled meanwhile resume when TCP next retransmits.
    /// - Parameter number: the host's number.
    /// - Throws: ``NetworkNamespaceLabError`` `commandFailed`.
    public func reconnect(_ number: Int) throws {
        try Self.ip(["-n", hub, "link", "set", host(number).port, "master", bridge])
    }

    /// Kills every process still in the lab's namespaces and deletes them (with them every device of the
    /// lab, the host namespace's end included). Runs once; also on release.
    public func remove() {
        guard !removed else { return }
        removed = true
        Self.delete(namespaces: hosts.map(\.namespace) + [hub], hostDevices: [hostDevice])
    }

    deinit { remove() }

    // MARK: - Helpers

    /// Deletes namespaces after killing what runs in them, then the host namespace's devices if still there.
    private static func delete(namespaces: [String], hostDevices: [String]) {
        for namespace in namespaces {
            let pids = (try? ip(["netns", "pids", namespace])) ?? ""
            for pid in pids.split(whereSeparator: \.isWhitespace).compactMap({ pid_t($0) }) {
                kill(pid, SIGKILL)
            }
            _ = try? ip(["netns", "delete", namespace])
        }
        for device in hostDevices {
            _ = try? ip(["link", "delete", device])
        }
    }

    /// Removes namespaces and host devices named `cpt<pid>…` whose pid no longer runs, or that start with
    /// `prefix`: what a run that crashed (or was killed) before its cleanup left.
    private static func removeLeftovers(prefix: String) {
        func stalePrefix(of name: Substring) -> Bool {
            guard name.hasPrefix("cpt") else { return false }
            if name.hasPrefix(prefix) { return true }
            guard let pid = pid_t(name.dropFirst(3).prefix { $0.isNumber }), pid > 0 else { return false }
            return kill(pid, 0) == -1 && errno == ESRCH
        }
        let namespaces = ((try? ip(["netns", "list"])) ?? "").split(separator: "\n").compactMap { line in
            line.split(separator: " ").first
        }
        let stale = namespaces.filter { stalePrefix(of: $0) && $0.contains("-") }.map(String.init)
        // `ip -o link` lines read "7: cpt123h@if6: <...": the name is the second field, up to '@' or ':'.
        let devices = ((try? ip(["-o", "link", "show"])) ?? "").split(separator: "\n").compactMap { line in
            line.split(separator: " ").dropFirst().first?.split(separator: "@").first?.split(separator: ":").first
        }
        let staleDevices = devices.filter { stalePrefix(of: $0) && $0.hasSuffix("h") }.map(String.init)
        delete(namespaces: stale, hostDevices: staleDevices)
    }

    /// A third octet for `10.213.X.0/24` that no route of the host namespace covers but the default one.
    private static func freeSubnetOctet(startingAt start: Int) throws(NetworkNamespaceLabError) -> Int {
        for step in 0..<240 {
            let octet = 16 + (start - 16 + step) % 240
            let routes = try ip(["-4", "route", "show", "match", "10.213.\(octet).0/24"])
            let covering = routes.split(separator: "\n").filter { !$0.hasPrefix("default") }
            if covering.isEmpty { return octet }
        }
        throw NetworkNamespaceLabError(
            code: .commandFailed,
            message: "every 10.213.X.0/24 with X from 16 to 255 is routed in the host namespace already"
        )
    }

    /// Runs `ip` with these arguments, for at most 10 seconds.
    /// - Returns: its standard output.
    @discardableResult
    private static func ip(_ arguments: [String]) throws(NetworkNamespaceLabError) -> String {
        let command = "ip " + arguments.joined(separator: " ")
        guard let ipPath else {
            throw NetworkNamespaceLabError(code: .unavailable, message: "iproute2's ip is not installed")
        }
        let output = TemporaryDirectory(prefix: "cachet-ip")
        let outPath = output.appending("out")
        let errPath = output.appending("err")
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ipPath)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle(forWritingAtPath: outPath)
        process.standardError = FileHandle(forWritingAtPath: errPath)
        do {
            try process.run()
        } catch {
            throw NetworkNamespaceLabError(code: .commandFailed, message: "\(command): \(error)")
        }
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning && Date() < deadline { usleep(2_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw NetworkNamespaceLabError(code: .commandFailed, message: "\(command): no answer within 10 s")
        }
        process.waitUntilExit()
        let out = (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? ""
        guard process.terminationStatus == 0 else {
            let err = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
            throw NetworkNamespaceLabError(
                code: .commandFailed,
                message: "\(command): exit status \(process.terminationStatus): "
                    + err.trimmingCharacters(in: .whitespacesAndNewlines)
            )
        }
        return out
    }
}
