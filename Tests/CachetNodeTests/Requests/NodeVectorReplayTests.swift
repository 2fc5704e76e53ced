import CachetNode
import CachetTestSupport
import Testing

@Suite("Node: Protocol/vectors replayed byte for byte", .dedicatedThreads)
struct NodeVectorReplayTests {
    static let vectors = ProtocolVector.loadAll()

    @Test func vectorsWereFound() {
        #expect(Self.vectors.count >= 20)
    }

    /// Each vector on a fresh node with default limits, over one real TCP connection; STATS replies are
    /// checked for every field PROTOCOL.md requires.
    @Test(arguments: vectors)
    func replay(_ vector: ProtocolVector) throws {
        try withNode({ $0.memoryLimit = 256 << 20 }) { _, port in
            try vector.replay(on: TestSocket(port: port))
        }
    }
}
