import CachetNode
import CachetTestSupport
import CachetWire
import Foundation
import Testing

@Suite("Node: Protocol/vectors replayed byte for byte")
struct NodeVectorReplayTests {
    static let vectors = ProtocolVector.loadAll()

    @Test(arguments: vectors)
    func replay(_ vector: ProtocolVector) throws {
        try withNode({ $0.memoryLimit = 256 << 20 }) { _, port in
            let client = try TestSocket(port: port)
            for step in vector.steps {
                switch step {
                case .send(let bytes):
                    try client.send(bytes)
                case .expect(let bytes):
                    let received = try client.readBytes(bytes.count)
                    #expect(received == bytes, "\(vector.name): reply differs")
                case .expectHeader(let header):
                    let reply = try client.readResponse()
                    let actual =
                        [
                            reply.version, reply.opcode.rawValue, UInt8(reply.status.rawValue >> 8),
                            UInt8(reply.status.rawValue & 0xff),
                        ] + withUnsafeBytes(of: reply.id.bigEndian, Array.init)
                    #expect(actual == header, "\(vector.name): header differs")
                    let object = try JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any]
                    #expect(
                        object?["items"] != nil && object?["version"] != nil,
                        "\(vector.name): STATS body is not the JSON object"
                    )
                case .shutdown:
                    shutdown(client.fd, Int32(SHUT_WR))
                case .close:
                    #expect(client.waitForClose(), "\(vector.name): the node did not close the connection")
                }
            }
        }
    }
}
