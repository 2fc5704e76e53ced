import CachetCluster
import CachetIO
import CachetStore
import CachetWire

/// Forwarding, as the connections see it: a request for a key another member owns goes to the loop's
/// ``ForwardCoordinator``, which sends it on and makes the client's reply. While forwards are in flight the connection goes on answering (and forwarding) the requests
/// behind them, holding their replies in request order (``ForwardPipeline``).
///
/// One per loop, a collaborator of its ``NodeIOQueue``; used only on the loop's queue (`@unchecked
/// Sendable` for the replies that come back there).
final class ConnectionForwarding: @unchecked Sendable {
    /// The loop whose connections forward.
    unowned let host: NodeIOQueue
    /// What sends requests on and makes the client's replies; nil on a node that never forwards.
    let coordinator: ForwardCoordinator?
    /// The loop's request processor, for the requests behind forwards in flight.
    let processor: RequestProcessor
    /// The budget the replies held behind forwards are charged to.
    let memory: ConnectionMemory

    init(host: NodeIOQueue, coordinator: ForwardCoordinator?, processor: RequestProcessor, memory: ConnectionMemory) {
        self.host = host
        self.coordinator = coordinator
        self.processor = processor
        self.memory = memory
    }

    /// Sends a request on to its owner (``ForwardCoordinator``) and reserves its reply's place in the
    /// connection's ``ForwardPipeline`` (made if the connection has none). Called while the connection's
    /// input is being processed: the caller goes on with the requests behind it (``processHeld(_:now:)``).
    /// The reply is filled in on this loop's queue, which the peer connections share, possibly before this
    /// returns (an owner marked down).
    func start(_ request: ForwardRequest, for connection: Connection) {
        let pipeline: ForwardPipeline
        if let existing = connection.forwards {
            pipeline = existing
        } else {
            pipeline = ForwardPipeline()
            connection.forwards = pipeline
        }
        let slot = pipeline.reserveForward(releasingTo: &connection.output)
        pipeline.processing = true
        defer { pipeline.processing = false }
        guard let coordinator else {
            // Only a node with a router forwards, and every such node has a coordinator.
            var reply = CachetByteBuffer(capacity: 256)
            appendMessage(
                "forwarding is not set up",
                status: .serverError,
                opcode: request.opcode,
                id: request.id,
                to: &reply
            )
            completeForward(Array(reply.readableRegion), slot: slot, pipeline: pipeline, connection: connection)
            return
        }
        let started = connection.turnStarted
        coordinator.forward(
            request,
            // The connection closed meanwhile: nobody waits for this reply.
            isWanted: { connection.forwards === pipeline }
        ) { [self] reply in
            processor.commands.counters.latencies.observe(
                LatencyCommand(request.opcode),
                nanoseconds: CachetDeadline.now() &- started
            )
            completeForward(reply, slot: slot, pipeline: pipeline, connection: connection)
        }
    }

    /// A forward's reply: fills its slot, moves the replies now at the front to the output (and drops the
    /// pipeline once nothing is in flight), charges what is still held to the budget, then, unless the
    /// connection is being processed now, sends and carries on with the requests behind (a connection that
    /// stopped reading for its forwards reads again).
    private func completeForward(
        _ reply: [UInt8],
        slot: CachetReplyOrder<[UInt8]>.Slot,
        pipeline: ForwardPipeline,
        connection: Connection
    ) {
        // Closed (`connectionClosed` drops the pipeline): nothing is written to a dead connection.
        guard connection.forwards === pipeline, !connection.isClosed else { return }
        pipeline.fill(slot, with: reply, releasingTo: &connection.output)
        if pipeline.isEmpty {
            connection.dropForwards()
        } else {
            connection.chargeForwards()
        }
        if pipeline.processing { return }
        let now = CachetClock.now()
        if case .waitingForForwards = connection.phase {
            connection.phase = .reading(frameLength: 0)
            host.process(connection, now: now)
        } else {
            guard host.send(connection) else { return }
        }
        host.settle(connection, now: now)
    }

    /// ``NodeIOQueue/process(_:now:)`` for a connection with forwards in flight: answers the whole frames in the input
    /// into the pipeline's pending replies (forwarding those that go to another member), until the input
    /// is used up, a bound is reached (``ForwardPipeline/maximumInFlight``, ``ForwardPipeline/heldLimit``,
    /// the budget's share for replies, the output limit), or a request must wait for the disk or a
    /// fan-out (as without forwards: the connection stops until it completes). Leaves the connection in
    /// the phase the input calls for; sends nothing (``NodeIOQueue/process(_:now:)`` does).
    /// - Returns: true when the last forward has answered meanwhile (at once: its owner marked down) and
    ///   the connection is still reading: the caller goes on processing as usual.
    func processHeld(_ connection: Connection, now: UInt32, tally: inout RequestTally) -> Bool {
        var yielded = false
        processing: while let pipeline = connection.forwards {
            let replyRoom = memory.replyRoom
            if pipeline.inFlight >= ForwardPipeline.maximumInFlight || pipeline.heldBytes > ForwardPipeline.heldLimit
                || replyRoom == 0
            {
                connection.phase = .waitingForForwards
                break
            }
            if connection.output.readableBytes > host.pendingOutputLimit(connection, room: replyRoom) {
                connection.phase = .waitingForOutput
                break
            }
            let outputLimit =
                min(ForwardPipeline.heldLimit - pipeline.filledBytes, pipeline.pending.capacity + replyRoom) - 2048
            let outputCapacityLimit = max(
                pipeline.pending.capacity + replyRoom,
                pipeline.pending.readableBytes == 0 ? ConnectionMemory.fairAllowance : 0
            )
            // Another protocol's requests are turned into native ones first (``NodeIOQueue/enterSessionTurn(_:outputLimit:now:tally:)``).
            // (One test of unchecked storage for a native connection.)
            let translated = connection.transformsOutput
            // (Nothing is answered into the connection's output here: replies are held behind the forwards.)
            if translated { host.enterSessionTurn(connection, outputLimit: 0, now: now, tally: &tally) }
            let result = processor.process(
                input: &connection.input,
                output: &pipeline.pending,
                outputLimit: outputLimit,
                outputCapacityLimit: outputCapacityLimit,
                now: now,
                access: &connection.access,
                tally: &tally,
                // Never straight to the socket: earlier replies are still held.
                directSend: nil,
                requestLimit: NodeIOQueue.requestsPerTurn
            )
            if translated {
                let end = host.leaveSessionTurn(connection, result)
                if end == .moreCommands { continue processing }
                if end == .closing { break processing }
            }
            switch result {
            case .needMoreBytes(let frameLength):
                if frameLength == 0 { connection.requestsTaken &+= 1 }
                connection.phase = .reading(frameLength: frameLength)
                break processing
            case .outputFull:
                // The held replies reached their bound: the forwards' answers release them.
                connection.phase = .waitingForForwards
                break processing
            case .memoryFull:
                connection.phase = .waitingForMemory(.reply)
                break processing
            case .closeAfterReply:
                host.beginClosing(connection)
                break processing
            case .suspended(.forward(let request)):
                tally.uncount(LatencyCommand(request.opcode))
                start(request, for: connection)
                connection.chargeForwards()
            case .suspended(let operation):
                tally.uncount(operation.latencyCommand)
                host.wait(for: operation, connection)
                break processing
            case .receivingValue(let direct):
                connection.phase = .receivingValue(direct)
                break processing
            case .yielded:
                connection.phase = .reading(frameLength: 0)
                host.yieldTurn(connection)
                yielded = true
                break processing
            }
        }
        guard connection.forwards == nil else {
            connection.chargeForwards()
            return false
        }
        if case .reading = connection.phase, !yielded { return true }
        return false
    }

    /// Sends a cluster-wide CLEAR or STATS to every member (``ForwardCoordinator/fanOut(_:answer:)``) and
    /// resumes the connection with the aggregate reply once all have answered or failed.
    func startFanOut(_ request: ForwardRequest, for connection: Connection) {
        let started = coordinator?.fanOut(request) { [self] body in
            host.resume(connection) { _, output, _ in
                body.withUnsafeBytes {
                    appendReply(opcode: request.opcode, status: .ok, id: request.id, body: $0, to: &output)
                }
            }
        }
        guard started != true else { return }
        host.resume(connection) { _, output, _ in
            appendMessage(
                "cluster-wide requests are not set up",
                status: .serverError,
                opcode: request.opcode,
                id: request.id,
                to: &output
            )
        }
    }
}
