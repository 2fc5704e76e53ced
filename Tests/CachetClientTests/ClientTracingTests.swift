import CachetClient
import CachetTestSupport
import InMemoryTracing
import Testing
import Tracing

#if canImport(Glibc)
import Glibc
#endif

/// A span per request through swift-distributed-tracing, against real nodes: its name and attributes, its
/// parent taken from the caller's context, a miss that is no error, a failure that is, and a request that
/// fails over from a dead node to the next of its key's preference list.
@Suite("CachetClient tracing")
struct ClientTracingTests {
    @Test func everyRequestIsASpanUnderTheCallersSpanAndFailoverIsRecorded() async throws {
        let cluster = try await NodeCluster.start(count: 3)
        let tracer = InMemoryTracer()
        let client = try CachetClient(configuration: cluster.configuration(), tracer: tracer)
        let parent = tracer.startSpan("handler", context: .topLevel)
        try await ServiceContext.withValue(parent.context) {
            try await client.put("t:1", value: [1])
            #expect(try await client.get("t:1") == [1])
            #expect(try await client.get("t:missing") == nil)
            #expect(try await client.delete("t:1"))
        }
        parent.end()
        var spans = tracer.popFinishedSpans().filter { $0.operationName != "handler" }
        #expect(spans.map(\.operationName) == ["PUT", "GET", "GET", "DEL"])
        for span in spans {
            #expect(span.kind == .client)
            #expect(
                span.traceID == parent.traceID && span.parentSpanID == parent.spanID,
                "a child of the handler's span"
            )
            #expect(span.attributes["db.system.name"]?.toSpanAttribute() == .string("cachet"))
            #expect(span.attributes["db.operation.name"]?.toSpanAttribute() == .string(span.operationName))
            #expect(span.attributes["server.address"]?.toSpanAttribute() == .string("127.0.0.1"))
            #expect(span.attributes["cachet.attempts"]?.toSpanAttribute() == .int64(1))
            #expect(span.attributes["cachet.failover"]?.toSpanAttribute() == .bool(false))
            #expect(span.errors.isEmpty && span.status == nil, "\(span.operationName): no failure")
        }
        #expect(spans[1].attributes["cachet.status"]?.toSpanAttribute() == .string("OK"))
        #expect(spans[2].attributes["cachet.status"]?.toSpanAttribute() == .string("NOT_FOUND"), "a miss is no error")
        let owner = client.owner(of: "t:1")
        #expect(spans[0].attributes["cachet.node"]?.toSpanAttribute() == .string(owner.id))
        #expect(spans[0].attributes["server.port"]?.toSpanAttribute() == .int64(Int64(owner.port)))

        // The owner of a key killed: the request goes to the next node, and the span says so.
        let dead = try #require(cluster.processes.first { $0.port == owner.port })
        _ = await dead.terminate(signal: SIGKILL)
        try await client.put("t:1", value: [2])
        spans = tracer.popFinishedSpans()
        let failedOver = try #require(spans.last)
        #expect(failedOver.attributes["cachet.failover"]?.toSpanAttribute() == .bool(true), "\(failedOver.attributes)")
        let attempts = failedOver.attributes["cachet.attempts"]?.toSpanAttribute()
        #expect(attempts == .int64(2) || attempts == .int64(1), "1 when the client already knew the node was down")
        #expect(failedOver.attributes["cachet.node"]?.toSpanAttribute() != .string(owner.id))

        // A failure is the span's error.
        await #expect(throws: CachetClientError.self) {
            try await client.put("t:big", value: [UInt8](repeating: 0, count: 65 << 20))
        }
        await client.shutdown()
        await #expect(throws: CachetClientError.self) { _ = try await client.get("t:1") }
        let failed = try #require(tracer.popFinishedSpans().last)
        #expect(failed.operationName == "GET" && failed.status?.code == .error && failed.errors.count == 1)
    }
}
