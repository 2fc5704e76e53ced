import CachetIO
import Testing

@testable import CachetNode

/// ``ForwardPipeline``: replies held behind forwards leave in request order, whatever order the forwards
/// answer in.
@Suite("Forward pipeline: replies in request order")
struct ForwardPipelineTests {
    @Test func repliesLeaveInRequestOrderAndThePipelineEmptiesOnce() {
        let pipeline = ForwardPipeline()
        var output = CachetByteBuffer(capacity: 64)
        // Requests: forward A, local 1, forward B, local 2 3, forward C, local 4.
        let a = pipeline.reserveForward(releasingTo: &output)
        pipeline.pending.append([1])
        let b = pipeline.reserveForward(releasingTo: &output)
        pipeline.pending.append([2, 3])
        let c = pipeline.reserveForward(releasingTo: &output)
        pipeline.pending.append([4])
        #expect(pipeline.inFlight == 3 && output.readableBytes == 0)
        #expect(pipeline.heldBytes == 4)

        pipeline.fill(c, with: [30], releasingTo: &output)
        pipeline.fill(b, with: [20], releasingTo: &output)
        #expect(output.readableBytes == 0, "all wait for A")
        #expect(pipeline.heldBytes == 6 && !pipeline.isEmpty)
        pipeline.fill(a, with: [10], releasingTo: &output)
        #expect(Array(output.readableRegion) == [10, 1, 20, 2, 3, 30, 4])
        #expect(pipeline.isEmpty && pipeline.inFlight == 0 && pipeline.heldBytes == 0)
    }

    @Test func repliesAtTheFrontLeaveAtOnce() {
        let pipeline = ForwardPipeline()
        var output = CachetByteBuffer(capacity: 64)
        let a = pipeline.reserveForward(releasingTo: &output)
        pipeline.pending.append([1])
        let b = pipeline.reserveForward(releasingTo: &output)
        pipeline.fill(a, with: [10], releasingTo: &output)
        #expect(Array(output.readableRegion) == [10, 1])
        #expect(!pipeline.isEmpty && pipeline.inFlight == 1)
        pipeline.pending.append([2])
        pipeline.fill(b, with: [20], releasingTo: &output)
        #expect(Array(output.readableRegion) == [10, 1, 20, 2])
        #expect(pipeline.isEmpty)
    }
}
