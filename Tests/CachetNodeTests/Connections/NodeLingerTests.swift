import CachetNode
import CachetStore
import CachetTestSupport
import CachetWire
import Dispatch
import Foundation
import Logging
import Testing

/// While an I/O queue lingers in `epoll_wait` on its own thread, work queued for it from elsewhere (a new
/// connection, a disk completion, shutdown) must still run at once: the loop's eventfd wakes it.
@Suite("Node: an I/O queue that lingers still takes new work", .dedicatedThreads)
struct NodeLingerTests {
    /// Keeps one connection busy so that the loop never goes quiet long enough to stop lingering.
    private final class BusyClient: @unchecked Sendable {
        private let socket: TestSocket
        private let stop = LockedCounter()
        private let done = DispatchSemaphore(value: 0)

        init(port: Int) throws { socket = try TestSocket(port: port) }

        func start() {
            DispatchQueue.global().async { [self] in
                while stop.value == 0 {
                    _ = try? socket.roundTrip(.ping)
                    usleep(200)
                }
                done.signal()
            }
        }

        func finish() {
            stop.increment()
            done.wait()
        }
    }

    @Test func aNewConnectionIsServedWhileTheLoopLingers() throws {
        try withNode({
            $0.ioQueueCount = 1
            $0.ioLingerMilliseconds = 1000
        }) { _, port in
            let busy = try BusyClient(port: port)
            busy.start()
            defer { busy.finish() }
            Thread.sleep(forTimeInterval: 0.05)
            for round in 0..<5 {
                let started = DispatchTime.now()
                let client = try TestSocket(port: port, timeout: 5)
                #expect(try client.roundTrip(.ping, id: UInt32(round)).status == .ok)
                let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
                // Without the wake-up, registering the connection would wait for the busy loop to go quiet.
                #expect(elapsed < 0.5, "round \(round): \(elapsed) s")
            }
        }
    }

    @Test func aDiskReadCompletesWhileTheLoopLingers() throws {
        let directory = TemporaryDirectory(prefix: "cachet-linger")
        try withNode({
            $0.ioQueueCount = 1
            $0.ioLingerMilliseconds = 1000
            $0.memoryLimit = 1 << 20
            $0.disk = CachetDiskConfiguration(directory: directory.path, limit: 64 << 20)
        }) { _, port in
            let client = try TestSocket(port: port, timeout: 5)
            let big = [UInt8](repeating: 3, count: 2 << 20)
            #expect(try client.roundTrip(.put(key: [UInt8]("big"), value: big, ttl: 0)).status == .ok)
            let busy = try BusyClient(port: port)
            busy.start()
            defer { busy.finish() }
            for _ in 0..<5 {
                let started = DispatchTime.now()
                // Larger than memory: answered by the disk queue, whose completion hops back to the loop.
                #expect(try client.roundTrip(.get(key: [UInt8]("big"))).body == big)
                let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
                #expect(elapsed < 0.5, "\(elapsed) s")
            }
        }
    }

    @Test func shutdownIsPromptWhileTheLoopLingers() throws {
        var configuration = CachetNodeConfiguration()
        configuration.port = 0
        configuration.ioLingerMilliseconds = 1000
        let server = try CachetNodeServer(configuration: configuration, logger: Logger(label: "cachet.test"))
        let port = try server.start()
        let client = try TestSocket(port: port)
        #expect(try client.roundTrip(.ping).status == .ok)
        client.close()
        let started = DispatchTime.now()
        server.shutdown(timeout: 5)
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        #expect(elapsed < 0.8, "\(elapsed) s")
    }
}
