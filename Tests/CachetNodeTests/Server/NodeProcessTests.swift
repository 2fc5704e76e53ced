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
    /// SIGTERM on a node on its own: it reads nothing more, answers the requests it had read (in order,
    /// each OK), closes with FIN after the last reply, and exits 0 once its client has closed too; the
    /// requests it did not answer were not applied (a restart on its data directory holds exactly the keys
    /// whose PUTs were answered). It had read a few hundred of the 2,000 when the signal came.
    @Test func sigtermAnswersWhatItHadReadAndAppliesNothingElse() throws {
        let data = TemporaryDirectory(prefix: "cachet-sigterm")
        defer { data.remove() }
        let node = try NodeProcess(arguments: ["--data-dir", data.path])
        let client = try node.connect()
        var batch: [UInt8] = []
        let count = 2000
        for i in 0..<count {
            CachetCommand.put(key: [UInt8]("k\(i)"), value: [UInt8](repeating: 1, count: 100), ttl: 0).encode(
                id: UInt32(i),
                to: &batch
            )
        }
        try client.send(batch)
        // Wait for the first reply so the node has read part of the batch, then ask it to stop.
        #expect(try client.readResponse().id == 0)
        let signalled = Date()
        kill(node.process.processIdentifier, SIGTERM)
        var answered = 1
        var ending = ""
        while answered < count {
            do {
                let reply = try client.readResponse()
                #expect(reply.id == UInt32(answered) && reply.status == .ok, "reply \(answered)")
                answered += 1
            } catch {
                ending = "\(error)"
                break
            }
        }
        #expect(answered == count || ending.contains("connection closed with 0 bytes"), "a FIN, not \(ending)")
        client.close()
        #expect(node.stop() == 0)
        #expect(Date().timeIntervalSince(signalled) < 5, "the node exits within a second plus its disk queue")
        #expect(node.log.contains("node stopped"))

        let restarted = try NodeProcess(arguments: ["--data-dir", data.path])
        let reader = try restarted.connect()
        var applied = 0
        var misplaced: [Int] = []
        for i in 0..<count {
            let found = try reader.roundTrip(.get(key: [UInt8]("k\(i)"))).status == .ok
            if found { applied += 1 }
            if found != (i < answered) { misplaced.append(i) }
        }
        #expect(misplaced.isEmpty, "\(answered) answered, \(applied) applied; first misplaced: \(misplaced.prefix(5))")
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
