import CachetCluster
import CachetStore
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What a node of a cluster adds to the node (`Protocol/CLUSTER.md`): the peers' health with the stand-in
/// ledger, the owner's hold (with the minority rule) and warm-up after a membership change, made from the
/// configuration and the data directory, and registered with the node's statistics. All nil for a cluster
/// of one (the hold too, unless it carries the minority rule for a member of a larger cluster).
struct NodeClusterParts {
    /// The owner's hold and the minority rule; nil in a cluster of one member at start.
    let hold: NodeReturnHold?
    /// The peers' health, the minority rule's count and the stand-in ledger; nil without a cluster file.
    let health: NodeHealth?
    /// Warm-up after a membership change; nil without a cluster file, or with `--warm-up-seconds 0`.
    let warmUp: NodeWarmUp?

    /// Makes the parts for a node of `configuration`, whose disk tier (if any) is `disk`.
    init(configuration: CachetNodeConfiguration, disk: DiskTier?, statistics: NodeStatistics, logger: Logger) {
        // Health, stand-ins and the owner's hold, for a node with a cluster file (`Protocol/CLUSTER.md`).
        let probe = UInt64(configuration.probeInterval * 1e9)
        let healthConfiguration = CachetPeerHealth.Configuration(
            initialBackoff: probe / 4,
            maximumBackoff: probe * 5,
            holdPeriod: probe * 10
        )
        let forwardTimeout = UInt64(configuration.forwardTimeout * 1e9)
        let holdPeriod =
            configuration.holdPeriod.map { UInt64($0 * 1e9) }
            ?? CachetReturnHold.recommendedHoldPeriod(health: healthConfiguration, forwardTimeout: forwardTimeout)
        // A member that has run before on this data directory (its stand-in log file is there, or its disk
        // tier has entries) holds from its start, whatever its disk tier holds: peers that have not seen it
        // come back still send its keys to a stand-in, and a write it took itself meanwhile would be
        // overtaken by the stand-in's older value, read through those peers. A member on a new directory
        // has not been away, and serves at once.
        let restarted =
            disk.map {
                $0.store.statistics.items > 0 || $0.store.isRecovering
                    || access($0.store.configuration.directory + "/" + CachetStandInLogFile.fileName, F_OK) == 0
            } ?? false
        // The hold also carries the minority rule, which needs no hold period.
        let hold: NodeReturnHold? =
            (configuration.cluster?.membership.members.count ?? 1) > 1
                && (holdPeriod > 0 || !configuration.servesOwnKeysInMinority)
            ? NodeReturnHold(
                holdPeriod: holdPeriod,
                stallThreshold: forwardTimeout,
                holdingAtStart: restarted,
                quietPeriod: CachetReturnHold.recommendedQuietPeriod(
                    forwardTimeout: forwardTimeout,
                    probeInterval: probe
                ),
                holdsInMinority: !configuration.servesOwnKeysInMinority,
                releasesEarly: !configuration.holdsFullPeriod,
                logger: logger
            ) : nil
        // The stand-in log is kept in the data directory, so that a crash of this node cannot lose what it
        // must tell a member it stood in for; without a disk tier it is kept in memory only.
        let standIns =
            configuration.cluster == nil
            ? nil
            : disk.map {
                StandInLedger.open(
                    directory: $0.store.configuration.directory,
                    membership: statistics.membership,
                    maximumFileBytes: $0.store.configuration.standInLogBytes,
                    logger: logger
                )
            }
        let health =
            configuration.cluster == nil
            ? nil
            : NodeHealth(
                membership: statistics.membership,
                configuration: healthConfiguration,
                hold: hold,
                holdPeriod: holdPeriod,
                logger: logger,
                standIns: standIns ?? StandInLedger()
            )
        statistics.health.withLock { $0 = health }
        statistics.hold.withLock { $0 = hold }
        let warmUp = health.flatMap { health in
            configuration.warmUpSeconds > 0
                ? NodeWarmUp(
                    membership: statistics.membership,
                    comparison: health.membershipComparison,
                    window: configuration.warmUpSeconds,
                    joining: !restarted,
                    learnsFromPeers: disk != nil
                ) : nil
        }
        statistics.warmUp.withLock { $0 = warmUp }
        self.hold = hold
        self.health = health
        self.warmUp = warmUp
    }
}
