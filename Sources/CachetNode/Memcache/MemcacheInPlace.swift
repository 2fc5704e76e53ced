/// What a memcached connection answers itself, with no native request between (``MemcacheSession``), on a
/// node without users or peers, where a native request would only come back to the same commands: `get`s of
/// what memory holds, and, on a node without a disk tier (where a write never waits), the storage commands.
/// One per loop, made once: a session reaches the commands through it, not through a copy of
/// ``NodeCommands`` each turn (which would retain each of its references).
final class MemcacheInPlace {
    /// The loop's commands, for the storage commands.
    let commands: NodeCommands
    /// The reads of memory.
    let reader: MemoryItemReader
    /// Whether storage commands are done in place too: the node has no disk tier.
    let stores: Bool

    init(commands: NodeCommands) {
        self.commands = commands
        reader = MemoryItemReader(
            store: commands.store,
            diskWorker: commands.disk?.worker,
            counters: commands.counters,
            casSource: commands.casSource
        )
        stores = commands.disk == nil
    }
}
