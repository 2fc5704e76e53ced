import CachetCLIKit
import CachetIO
import CachetTestSupport
import Dispatch
import Foundation
import Testing

/// A peer on 127.0.0.1 that answers the first connection with fixed bytes and then keeps it open without
/// sending more: a server that is not a Cachet node, or a corrupt stream.
final class FakePeer: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let done = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)

    init(answer: [UInt8]) throws {
        (listener, port) = try CachetSocket.listen(on: CachetAddress(host: "127.0.0.1", port: 0))
        let listener = listener
        DispatchQueue.global().async { [done, finished] in
            defer { finished.signal() }
            let deadline = CachetDeadline(after: .seconds(10))
            var accepted: Int32?
            while accepted == nil && !deadline.hasPassed {
                guard CachetSocket.wait(listener, for: Int16(POLLIN), until: deadline) else { break }
                accepted = try? CachetSocket.accept(listener)
            }
            guard let fd = accepted else { return }
            _ = answer.withUnsafeBytes { CachetSocket.send(fd, $0) }
            // Hold the connection open until the test is done (at most the deadline).
            _ = done.wait(timeout: .now() + .seconds(10))
            CachetSocket.close(fd)
        }
    }

    func stop() {
        done.signal()
        _ = finished.wait(timeout: .now() + .seconds(11))
        CachetSocket.close(listener)
    }
}

func lengthPrefix(_ length: UInt32) -> [UInt8] { withUnsafeBytes(of: length.bigEndian) { Array($0) } }

@Suite("cachet-cli: bad addresses and bad peers", .dedicatedThreads)
struct CachetCLIBadPeerTests {
    @Test(arguments: [
        ("127.0.0.1", 99999), ("127.0.0.1", 0), ("127.0.0.1", -1), ("not a host", 7420), ("999.1.1.1", 7420),
        ("", 7420), ("[::1]", 7420),
    ])
    func invalidAddressesAreUsageErrors(host: String, port: Int) {
        #expect {
            try CachetCLIConnection.validate(host: host, port: port)
        } throws: { error in
            (error as? CachetCLIError)?.code == .usage
        }
    }

    @Test(arguments: [("127.0.0.1", 7420), ("::1", 1), ("localhost", 65535), ("node-1.example.com", 80)])
    func validAddressesPass(host: String, port: Int) {
        #expect(throws: Never.self) { try CachetCLIConnection.validate(host: host, port: port) }
    }

    @Test func anOutOfRangePortExitsAsAUsageError() throws {
        let (output, status) = try runCLI(["--port", "99999", "ping"])
        #expect(status == 64)
        #expect(output.contains("port 99999 is out of range"))
        #expect(!output.contains("cannot connect"))
        let (hostOutput, hostStatus) = try runCLI(["--host", "bad host!", "ping"])
        #expect(hostStatus == 64)
        #expect(hostOutput.contains("'bad host!' is not a host"))
    }

    @Test(arguments: [
        (lengthPrefix(3), "shorter than the 8-byte header"),
        (lengthPrefix(0), "shorter than the 8-byte header"),
        (lengthPrefix(UInt32.max), "more than the limit of 67108864"),
        (lengthPrefix((64 << 20) + 1), "more than the limit of 67108864"),
    ])
    func anImpossibleReplyLengthIsReportedAtOnce(answer: [UInt8], expected: String) throws {
        let peer = try FakePeer(answer: answer)
        defer { peer.stop() }
        let connection = try CachetCLIConnection(host: "127.0.0.1", port: peer.port, timeout: 5)
        let started = ContinuousClock.now
        #expect {
            _ = try connection.send(.ping)
        } throws: { error in
            let error = error as? CachetCLIError
            return error?.code == .protocolViolation && error?.message.contains(expected) == true
        }
        #expect(ContinuousClock.now - started < .seconds(2))
    }

    @Test func theExecutableReportsAnImpossibleLengthAtOnce() throws {
        let peer = try FakePeer(answer: lengthPrefix(3) + [1, 2, 3])
        defer { peer.stop() }
        let started = ContinuousClock.now
        let (output, status) = try runCLI(["--port", "\(peer.port)", "--timeout", "5", "ping"])
        #expect(ContinuousClock.now - started < .seconds(3))
        #expect(status == 2)
        #expect(output.contains("invalid reply from 127.0.0.1:\(peer.port)"))
        #expect(output.contains("announced a reply of 3 bytes"))
    }

    @Test func aPeerClosingMidReplySaysSo() throws {
        let peer = try FakePeer(answer: lengthPrefix(20) + [1, 6])
        let connection = try CachetCLIConnection(host: "127.0.0.1", port: peer.port, timeout: 5)
        peer.stop()
        #expect {
            _ = try connection.send(.ping)
        } throws: { error in
            let error = error as? CachetCLIError
            return error?.code == .connection && error?.message.contains("closed the connection after 6 bytes") == true
        }
    }
}
