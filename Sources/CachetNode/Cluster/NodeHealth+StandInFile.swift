import CachetCluster
import CachetStore
import Logging

extension NodeHealth {
    /// Reads the stand-in log back from the data directory at start (`Protocol/CLUSTER.md`, "The
    /// stand-in's log"), and makes the file hold just that from then on.
    ///
    /// Every owner with records starts standing in, so it is told on its first answer; its keys are
    /// delivered but not served here (``CachetStandInLog/restore(owner:keys:overflowed:)``). A file that
    /// cannot be read whole (a bad header, a corrupt record, a read error) may have named any member after
    /// the damage, so every member of the cluster in force, and every owner it named, gets a CLEAR. A last
    /// record cut short is an append that did not finish: the write it was for was never answered, so it is
    /// ignored. Both are logged as warnings. When the file cannot be rewritten, it is logged as an error and
    /// writes for a member that is down are refused from then on.
    /// - Parameters:
    ///   - directory: the data directory.
    ///   - membership: the node's id and members.
    ///   - limits: the log's bounds per owner.
    ///   - logger: where problems are logged.
    /// - Returns: the file, and the log to start from.
    static func openStandInFile(
        directory: String,
        membership: CachetNodeMembership,
        limits: CachetStandInLog.Limits = .init(),
        logger: Logger
    ) -> (file: CachetStandInLogFile, log: CachetStandInLog) {
        let (file, replay) = CachetStandInLogFile.open(
            directory: directory,
            maximumKeys: limits.maximumKeys,
            maximumBytes: limits.maximumBytes
        )
        var log = CachetStandInLog(limits: limits)
        let (nodeID, current) = membership.snapshot()
        for (owner, entry) in replay.owners where owner != nodeID {
            log.restore(owner: owner, keys: entry.keys, overflowed: entry.overflowed || replay.damage != nil)
        }
        if let damage = replay.damage {
            for member in current.members where member.id != nodeID {
                log.restore(owner: member.id, keys: [], overflowed: true)
            }
            let message =
                "the stand-in log file \(damage): the members it did not name whole are unknown, so every member "
                + "gets a CLEAR on its next answer"
            logger.warning(
                "\(message)",
                metadata: ["disk.path": "\(file.path)", "standin.records_read": "\(replay.records)"]
            )
        }
        if replay.truncatedTail > 0 {
            logger.warning(
                "the stand-in log file ends in a record cut short, an append that did not finish (the write it was for was not answered); ignored",
                metadata: ["disk.path": "\(file.path)", "standin.bytes_ignored": "\(replay.truncatedTail)"]
            )
        }
        let owners = log.ownersNotClean
        if !owners.isEmpty {
            logger.notice(
                "stand-in log read back: these members are told what this node wrote for them on their next answer",
                metadata: [
                    "cluster.members": "\(owners.joined(separator: ","))", "standin.records_read": "\(replay.records)",
                ]
            )
        }
        if let failure = file.rewrite(fileEntries(log)) {
            logger.error("\(failure.message)", metadata: ["disk.path": "\(file.path)"])
        }
        return (file, log)
    }

    /// What the stand-in file must hold for `log`: each owner not clean, with its keys and overflow.
    static func fileEntries(_ log: CachetStandInLog) -> [(owner: String, keys: [[UInt8]], overflowed: Bool)] {
        log.ownersNotClean.map { owner in
            let recorded = log.recorded(for: owner)
            return (owner, recorded.keys, recorded.overflowed)
        }
    }
}
