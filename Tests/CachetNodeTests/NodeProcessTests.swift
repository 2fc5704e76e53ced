import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Resident memory of a process in bytes, from /proc.
func residentBytes(of pid: Int32) -> Int {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        let kib = line.split(separator: " ").compactMap { Int($0) }.first ?? 0
        return kib * 1024
    }
    return 0
}

@Suite("Node: a real cachet-node process", .dedicatedThreads)
struct NodeProcessTests {
    @Test func sigtermAnswersWhatWasSentAndExitsZero() throws {
        let node = try NodeProcess()
        let client = try node.connect()
        var batch: [UInt8] = []
        for i in 0..<2000 {
            CachetCommand.put(key: [UInt8]("k\(i)"), value: [UInt8](repeating: 1, count: 100), ttl: 0).encode(
                id: UInt32(i),
                to: &batch
            )
        }
        try client.send(batch)
        // Wait for the first reply so the node has the batch, then ask it to stop.
        #expect(try client.readResponse().id == 0)
        kill(node.process.processIdentifier, SIGTERM)
        for i in 1..<2000 {
            let reply = try client.readResponse()
            #expect(reply.id == UInt32(i) && reply.status == .ok)
        }
        #expect(client.waitForClose())
        #expect(node.stop() == 0)
        #expect(node.log.contains("node stopped"))
    }

    @Test func sigintAlsoExitsZero() throws {
        let node = try NodeProcess()
        #expect(try node.connect().roundTrip(.ping).status == .ok)
        #expect(node.stop(signal: SIGINT) == 0)
    }

    @Test func aClientThatNeverReadsDoesNotGrowTheNode() throws {
        let node = try NodeProcess(arguments: ["--memory-limit", "64MiB"])
        let writer = try node.connect()
        let value = [UInt8](repeating: 0x5a, count: 1 << 20)
        #expect(try writer.roundTrip(.put(key: [UInt8]("big"), value: value, ttl: 0)).status == .ok)
        let baseline = residentBytes(of: node.process.processIdentifier)

        // A second client asks for the 1 MiB value a million times (a terabyte of replies) and never reads.
        let hog = try node.connect()
        hog.setReceiveBuffer(4096)
        let flags = fcntl(hog.fd, F_GETFL)
        _ = fcntl(hog.fd, F_SETFL, flags | O_NONBLOCK)
        let request = CachetCommand.get(key: [UInt8]("big")).encoded(id: 1)
        var requests: [UInt8] = []
        requests.reserveCapacity(request.count * 1_000_000)
        for _ in 0..<1_000_000 { requests += request }
        var sent = 0
        let deadline = Date().addingTimeInterval(3)
        while sent < requests.count && Date() < deadline {
            let n = requests.withUnsafeBytes {
                send(hog.fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL))
            }
            if n > 0 { sent += n } else { Thread.sleep(forTimeInterval: 0.01) }
        }
        // The node stopped reading: the requests could not all be sent.
        #expect(sent < requests.count)
        let grown = residentBytes(of: node.process.processIdentifier) - baseline
        #expect(grown < 48 << 20, "node grew by \(grown) bytes for a client that never reads")
        // Everyone else is still served.
        let other = try node.connect()
        #expect(try other.roundTrip(.get(key: [UInt8]("big"))).body.count == value.count)
        hog.close()
        #expect(node.stop() == 0)
    }

    /// CPU seconds a process has used (user and system, all threads).
    static func cpuSeconds(of pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // Fields after the command: state is 0, utime is 11, stime is 12.
        let ticks = (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/prlimit"), "prlimit is not installed"))
    func outOfDescriptorsTheNodeNeitherSpinsNorStops() throws {
        // 32 descriptors: a few for the process itself, then connections until accept fails with EMFILE.
        let node = try NodeProcess(arguments: ["--disk-limit", "0"], launcher: ["/usr/bin/prlimit", "--nofile=32"])
        var clients: [TestSocket] = []
        for _ in 0..<40 { clients.append(try node.connect()) }
        Thread.sleep(forTimeInterval: 0.3)
        let before = Self.cpuSeconds(of: node.process.processIdentifier)
        Thread.sleep(forTimeInterval: 1)
        let spent = Self.cpuSeconds(of: node.process.processIdentifier) - before
        #expect(spent < 0.5, "the node used \(spent) s of CPU in 1 s while out of descriptors")
        #expect(node.log.contains("pausing accepts"))
        // The first connections are served; once they close, waiting ones are accepted and served too.
        // How many the node accepted depends on the descriptors it holds itself (about a dozen), so the
        // test closes 30: every accepted one, whatever that count, which leaves the last 10 to be accepted.
        #expect(try clients[0].roundTrip(.ping).status == .ok)
        for client in clients.prefix(30) { client.close() }
        clients.removeFirst(30)
        let last = clients.last!
        last.setTimeout(5)
        #expect((try? last.roundTrip(.ping))?.status == .ok, "a connection waiting for a descriptor was not served")
        #expect(node.stop() == 0)
    }

    @Test func rejectsBadFlagsWithAClearMessage() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BuiltProducts.path(of: "cachet-node"))
        process.arguments = ["--memory-limit", "12 bananas"]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = Pipe()
        try process.run()
        process.waitUntilExit()
        let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus != 0)
        #expect(text.contains("12 bananas"))
    }
}
