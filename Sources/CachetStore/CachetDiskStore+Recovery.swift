import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// Rebuilding the index from the entry files after a crash (no index file from a clean shutdown).
extension CachetDiskStore {
    /// Whether the index is still being rebuilt from the files.
    public var isRecovering: Bool { state.withLock { $0.recovering } }

    /// Starts rebuilding the index from the entry files on a background queue, if the index file of a
    /// clean shutdown was missing. Returns at once; does nothing when there is nothing to rebuild or a
    /// rebuild has already started.
    public func startRecovery() {
        let start = state.withLock { state -> Bool in
            guard state.recovering, !state.recoveryStarted, !state.closed else { return false }
            state.recoveryStarted = true
            return true
        }
        guard start else { return }
        recoveryDone.enter()
        DispatchQueue(label: "cachet.disk.recovery", qos: .utility).async { [self] in
            recover()
            recoveryDone.leave()
        }
    }

    /// Blocks until a started recovery has finished.
    public func waitForRecovery() {
        recoveryDone.wait()
    }

    /// Scans every entry file into the index (on the recovery queue), deleting temporary, corrupt and
    /// expired files; stops early when the tier closes.
    private func recover() {
        let started = DispatchTime.now()
        let now = CachetClock.now()
        var complete = true
        Self.forEachEntryFile(directory: configuration.directory) { path, name in
            if state.withLock({ $0.cancelRecovery }) {
                complete = false
                return false
            }
            io.withLock { _ in
                if name.hasSuffix(".tmp") {
                    unlink(path)
                    return
                }
                switch Self.scanFile(path, name: name) {
                case .gone:
                    break
                case .corrupt:
                    warnFailure("corrupt entry file deleted", metadata: ["disk.path": "\(path)"])
                    unlink(path)
                    state.withLock { $0.statistics.corrupt += 1 }
                case .entry(let digest, let fileSize, let logicalSize, let expiry, let modified):
                    if CachetClock.isExpired(expiry, now: now) {
                        // Unless a write since start-up replaced it, the file is dead.
                        if state.withLock({ $0.index.lookup(digest) == nil }) {
                            unlink(path)
                            state.withLock { $0.statistics.expired += 1 }
                        }
                        return
                    }
                    state.withLock { state in
                        // Entries written or read since start-up are newer than anything found here; a
                        // file known to be stale is never indexed.
                        if state.index.lookup(digest) == nil && !state.staleClear && !state.staleFiles.contains(digest)
                        {
                            state.index.appendOldest(
                                digest,
                                fileSize: fileSize,
                                logicalSize: logicalSize,
                                expiry: expiry,
                                scannedModified: modified
                            )
                        }
                    }
                }
            }
            return true
        }
        // Files were found in directory order; put what nothing has used since in order of write time, so
        // the limit evicts the oldest writes first. Sorted outside the lock: the network queues keep asking
        // `contains`.
        let scanned = complete ? state.withLock { $0.index.scannedEntries() }.sorted { $0.modified > $1.modified } : []
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        let items = state.withLock { state -> Int in
            if complete {
                state.index.moveToOldestEnd(scanned)
                state.recovering = false
            }
            return state.index.count
        }
        if complete {
            trimToLimit()
            logger.info(
                "disk index rebuilt from the files",
                metadata: ["disk.items": "\(items)", "disk.scan_seconds": "\(seconds)"]
            )
        }
    }
}
