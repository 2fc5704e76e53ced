import CachetNode
import CachetStore
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
        // Values in parts are stored in the disk tier: that vector runs on a node with one.
        let directory = vector.name == "put-parts" ? TemporaryDirectory(prefix: "cachet-vector") : nil
        defer { directory?.remove() }
        try withNode({
            $0.memoryLimit = 256 << 20
            if let directory {
                $0.disk = CachetDiskConfiguration.sized(
                    footprint: 64 << 20,
                    directory: directory.path,
                    standInLog: false
                )
            }
        }) { _, port in
            try vector.replay(on: TestSocket(port: port))
        }
    }
}
