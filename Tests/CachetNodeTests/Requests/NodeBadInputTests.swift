import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Testing

/// Builds a raw request frame with any header values, for inputs the typed encoder refuses to make.
func rawFrame(version: UInt8 = 1, opcode: UInt8, flags: UInt16 = 0, id: UInt32, body: [UInt8] = []) -> [UInt8] {
    var bytes: [UInt8] = []
    CachetFrameEncoder.appendBigEndian(UInt32(8 + body.count), to: &bytes)
    bytes.append(version)
    bytes.append(opcode)
    CachetFrameEncoder.appendBigEndian(flags, to: &bytes)
    CachetFrameEncoder.appendBigEndian(id, to: &bytes)
    return bytes + body
}

@Suite("Node: bad input gets a clear status and breaks nothing else", .dedicatedThreads)
struct NodeBadInputTests {
    struct StaysOpen: CustomTestStringConvertible, Sendable {
        var name: String
        var frame: [UInt8]
        var status: CachetStatus
        var message: String
        var testDescription: String { name }
    }

    static let staysOpen: [StaysOpen] = [
        StaysOpen(
            name: "unknown opcode",
            frame: rawFrame(opcode: 0x0b, id: 11),
            status: .unknownOpcode,
            message: "unknown opcode 0x0b"
        ),
        StaysOpen(
            name: "unsupported version",
            frame: rawFrame(version: 2, opcode: 0x06, id: 12),
            status: .unsupportedVersion,
            message: "protocol version 2 is not supported; this node speaks version 1"
        ),
        StaysOpen(
            name: "empty key",
            frame: rawFrame(opcode: 0x02, id: 13, body: [0, 0]),
            status: .badRequest,
            message: "empty key: keys are 1 to 4096 bytes"
        ),
        StaysOpen(
            name: "key longer than its body",
            frame: rawFrame(opcode: 0x02, id: 14, body: [0, 9, 0x61]),
            status: .badRequest,
            message: "key body declares a 9-byte key but only 1 bytes follow"
        ),
        StaysOpen(
            name: "bytes after the key",
            frame: rawFrame(opcode: 0x03, id: 15, body: [0, 1, 0x61, 0x62]),
            status: .badRequest,
            message: "key body declares a 1-byte key but carries 2 bytes after its length"
        ),
        StaysOpen(
            name: "PUT body shorter than its prefix",
            frame: rawFrame(opcode: 0x01, id: 16, body: [0, 0, 0]),
            status: .badRequest,
            message: "PUT body of 3 bytes is shorter than its 6-byte ttl and key length"
        ),
        StaysOpen(
            name: "key over 4096 bytes",
            frame: rawFrame(opcode: 0x02, id: 17, body: [0x10, 0x01] + [UInt8](repeating: 0x61, count: 4097)),
            status: .tooLarge,
            message: "key of 4097 bytes exceeds the 4096-byte limit"
        ),
        StaysOpen(
            name: "PING with a body",
            frame: rawFrame(opcode: 0x06, id: 18, body: [1]),
            status: .badRequest,
            message: "this opcode takes an empty body, got 1 bytes"
        ),
    ]

    @Test(arguments: staysOpen)
    func errorThatKeepsTheConnection(_ input: StaysOpen) throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            try client.send(input.frame)
            let reply = try client.readResponse()
            let id = UInt32(
                bigEndian: input.frame.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 8, as: UInt32.self) }
            )
            #expect(reply.status == input.status)
            #expect(reply.id == id)
            #expect(reply.opcode.rawValue == input.frame[5])
            #expect(reply.bodyText == input.message)
            // The same connection still works.
            #expect(try client.roundTrip(.put(key: [UInt8]("after"), value: [1], ttl: 0), id: 99).status == .ok)
            #expect(try client.roundTrip(.get(key: [UInt8]("after")), id: 100).body == [1])
        }
    }

    @Test func payloadShorterThanTheHeaderClosesAfterBadRequest() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            let bystander = try TestSocket(port: port)
            try client.send([0, 0, 0, 3, 1, 2, 3])
            let reply = try client.readResponse()
            #expect(
                reply
                    == CachetResponse(
                        opcode: .none,
                        status: .badRequest,
                        id: 0,
                        body: [UInt8]("payload of 3 bytes is shorter than the 8-byte header")
                    )
            )
            #expect(client.waitForClose())
            #expect(try bystander.roundTrip(.ping).status == .ok)
        }
    }

    @Test func oversizedLengthClosesAfterTooLargeWithoutBufferingIt() throws {
        try withNode({ $0.maximumPayloadLength = 1 << 20 }) { server, port in
            let client = try TestSocket(port: port)
            try client.send([0x04, 0xC4, 0xB4, 0x00])  // 80,000,000 bytes announced, none sent
            let reply = try client.readResponse()
            #expect(reply.status == .tooLarge)
            #expect(reply.opcode == .none && reply.id == 0)
            #expect(reply.bodyText == "frame of 80000000 bytes exceeds --max-frame 1048576")
            #expect(client.waitForClose())
            #expect(try TestSocket(port: port).roundTrip(.ping).status == .ok)
            _ = server
        }
    }

    @Test func peerVanishingMidFrameIsDroppedQuietly() throws {
        try withNode { _, port in
            let client = try TestSocket(port: port)
            // A whole PUT, then half of another.
            try client.send(CachetCommand.put(key: [UInt8]("whole"), value: [1], ttl: 0).encoded(id: 1))
            #expect(try client.readResponse().status == .ok)
            let partial = CachetCommand.put(key: [UInt8]("half"), value: [UInt8](repeating: 2, count: 100), ttl: 0)
                .encoded(id: 2)
            try client.send(Array(partial.prefix(40)))
            shutdown(client.fd, Int32(SHUT_WR))
            #expect(client.waitForClose())
            let other = try TestSocket(port: port)
            #expect(try other.roundTrip(.get(key: [UInt8]("whole"))).body == [1])
            #expect(try other.roundTrip(.get(key: [UInt8]("half"))).status == .notFound)
        }
    }

    @Test func garbageBytesDoNotDisturbOtherClients() throws {
        try withNode { _, port in
            var generator = SystemRandomNumberGenerator()
            for _ in 0..<20 {
                let client = try TestSocket(port: port, timeout: 2)
                let garbage = (0..<Int.random(in: 1...300, using: &generator)).map { _ in
                    UInt8.random(in: 0...255, using: &generator)
                }
                try? client.send(garbage)
                shutdown(client.fd, Int32(SHUT_WR))
                _ = client.waitForClose()
            }
            #expect(try TestSocket(port: port).roundTrip(.ping).status == .ok)
        }
    }
}
