import CachetIO
import CachetStore
import Dispatch

/// Disk dispatch: a GET that missed memory, a PUT bound for the disk tier, or a CLEAR goes to the disk
/// worker; its completion hops back to the loop's queue, where the host writes the reply
/// (``DiskCompletions``) and carries on with the connection's requests.
///
/// One per loop of a node with a disk tier, a collaborator of its ``NodeIOQueue``; used only on the loop's
/// queue (`@unchecked Sendable` for the completions that hop back there).
final class DiskDispatch: @unchecked Sendable {
    /// The loop whose connections wait.
    unowned let host: NodeIOQueue
    /// The disk tier.
    let disk: DiskTier
    /// The budget a PUT waiting for room in the disk queue is charged to.
    let memory: ConnectionMemory

    init(host: NodeIOQueue, disk: DiskTier, memory: ConnectionMemory) {
        self.host = host
        self.disk = disk
        self.memory = memory
    }

    /// Starts a disk operation a connection waits for. A PUT waiting for room in the disk queue holds its
    /// copy of the value: counted in the connections' budget until the queue takes it (``start(_:for:)``
    /// gives it back).
    func begin(_ operation: PendingOperation, for connection: Connection) {
        if case .put(let key, let value, _, _) = operation { memory.charge(key.count + value.count) }
        start(operation, for: connection)
    }

    /// Hands a disk operation to the disk queue; its completion hops back to the loop's queue.
    private func start(_ operation: PendingOperation, for connection: Connection) {
        switch operation {
        case .get, .rangedGet:
            let key = operation.diskReadKey.unsafelyUnwrapped
            disk.worker.get(key: key, now: CachetClock.now()) { [self] entry in
                host.execute { [self] in
                    host.resume(connection) { processor, output, now in
                        processor.diskCompletions.completeGet(operation, entry: entry, output: &output, now: now)
                    }
                }
            }
        case .put(let key, let value, let expiry, let id):
            // Charged to the budget when the PUT began to wait (``begin(_:for:)``), given back once it stops.
            let held = key.count + value.count
            disk.worker.notifyWhenWritable { [self] in
                host.execute { [self] in
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
                        host.resume(connection) { processor, output, _ in
                            processor.diskCompletions.completePut(id: id, output: &output)
                        }
                    case .full:
                        start(operation, for: connection)
                    case .refused(let error):
                        memory.charge(-held)
                        host.resume(connection) { processor, output, now in
                            processor.diskCompletions.refusePut(
                                key: key,
                                id: id,
                                error: error,
                                output: &output,
                                now: now
                            )
                        }
                    }
                }
            }
        case .clear(let id, let prefixes, let memoryOnlyItems, let memoryOnlyBytes):
            let completion: @Sendable (CachetDiskClearResult) -> Void = { [self] removed in
                host.execute { [self] in
                    host.resume(connection) { processor, output, _ in
                        processor.diskCompletions.completeClear(
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
}
