import CachetIO
import CachetStore
import Dispatch

/// Disk dispatch: a GET that missed memory, a PUT bound for the disk tier, or a CLEAR goes to the disk
/// worker; its completion hops back to the loop's queue, writes the reply and carries on with the
/// connection's requests.
extension NodeIOQueue {
    /// Makes a connection wait for a disk operation or a fan-out, and starts it. A PUT waiting for room
    /// in the disk queue holds its copy of the value: counted in the connections' budget until the queue
    /// takes it (``start(_:for:)`` gives it back).
    func wait(for operation: PendingOperation, _ connection: Connection) {
        connection.phase = .waitingForCompletion
        connection.waitingCommand = operation.latencyCommand
        if case .put(let key, let value, _, _) = operation { memory.charge(key.count + value.count) }
        start(operation, for: connection)
    }

    /// Hands an operation to the disk queue; its completion hops back to this loop's queue.
    func start(_ operation: PendingOperation, for connection: Connection) {
        switch operation {
        case .forward(let request):
            // `process` starts forwards itself and goes on with the requests behind them.
            startForward(request, for: connection)
            return
        case .fanOut(let request):
            startFanOut(request, for: connection)
            return
        case .watch(let start):
            startWatch(start.request, id: start.id, for: connection)
            return
        default:
            break
        }
        guard let disk = processor.disk else { return }
        switch operation {
        case .get(let key, _, _, _, _):
            disk.worker.get(key: key, now: CachetClock.now()) { [self] entry in
                execute { [self] in
                    resume(connection) { processor, output, now in
                        processor.completeDiskGet(operation, entry: entry, output: &output, now: now)
                    }
                }
            }
        case .put(let key, let value, let expiry, let id):
            // Charged to the budget when the PUT began to wait (`process`), given back once it stops.
            let held = key.count + value.count
            disk.worker.notifyWhenWritable { [self] in
                execute { [self] in
                    // A connection closed meanwhile (or closing at shutdown) has given up on this PUT: it was
                    // never acknowledged.
                    guard case .waitingForCompletion = connection.phase else {
                        memory.charge(-held)
                        disk.worker.abandonWrite(key: key)
                        return
                    }
                    switch disk.worker.submitPut(key: key, value: value, expiry: expiry) {
                    case .queued:
                        memory.charge(-held)
                        resume(connection) { processor, output, _ in processor.completePut(id: id, output: &output) }
                    case .full:
                        start(operation, for: connection)
                    case .refused(let error):
                        memory.charge(-held)
                        resume(connection) { processor, output, now in
                            processor.refusePut(key: key, id: id, error: error, output: &output, now: now)
                        }
                    }
                }
            }
        case .clear(let id, let prefixes, let memoryOnlyItems, let memoryOnlyBytes):
            let completion: @Sendable (CachetDiskClearResult) -> Void = { [self] removed in
                execute { [self] in
                    resume(connection) { processor, output, _ in
                        processor.completeClear(
                            id: id,
                            memoryOnlyItems: memoryOnlyItems,
                            memoryOnlyBytes: memoryOnlyBytes,
                            disk: removed,
                            output: &output
                        )
                    }
                }
            }
            if prefixes.isEmpty {
                disk.worker.removeAll(completion: completion)
            } else {
                disk.worker.removeAll(prefixes: prefixes, completion: completion)
            }
        case .forward, .fanOut, .watch:
            break
        }
    }

    /// Writes a completed operation's reply (held behind the connection's forwards in flight, if any),
    /// then carries on with the requests behind it.
    func resume(
        _ connection: Connection,
        reply: (RequestProcessor, inout CachetByteBuffer, UInt32) -> Void
    ) {
        guard case .waitingForCompletion = connection.phase else { return }
        processor.counters.latencies.observe(
            connection.waitingCommand,
            nanoseconds: CachetDeadline.now() &- connection.turnStarted
        )
        let now = CachetClock.now()
        if let forwards = connection.forwards {
            reply(processor, &forwards.pending, now)
        } else {
            reply(processor, &connection.output, now)
        }
        connection.phase = .reading(frameLength: 0)
        process(connection, now: now)
        settle(connection, now: now)
    }
}
