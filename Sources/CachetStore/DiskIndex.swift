/// The disk tier's in-memory index: every entry file's size, logical size and expiry, in LRU order.
///
/// Not thread-safe; ``CachetDiskStore`` guards it with a lock. Nodes live in a flat array linked by
/// 32-bit indices, so the index costs about 70 bytes per entry with the dictionary.
struct DiskIndex {
    struct Node {
        var digest: KeyDigest
        var fileSize: Int
        var logicalSize: Int
        var expiry: UInt32
        var prev: Int32 = -1
        var next: Int32 = -1
        /// The modification time (Unix seconds, at least 1) of the file of an entry a start-up scan found
        /// and nothing has used since; 0 otherwise. Fits the padding: the node stays 64 bytes.
        var scannedModified: UInt32 = 0
    }

    private var nodes: [Node] = []
    private var freeList: [Int32] = []
    private var map: [KeyDigest: Int32] = [:]
    /// Most recently used.
    private var head: Int32 = -1
    /// Least recently used.
    private var tail: Int32 = -1
    private(set) var fileBytes = 0
    private(set) var logicalBytes = 0
    /// The next slot ``expiredDigests(now:budget:)`` examines.
    private var sweepCursor = 0

    var count: Int { map.count }

    func lookup(_ digest: KeyDigest) -> Node? {
        map[digest].map { nodes[Int($0)] }
    }

    /// Inserts or replaces an entry as the most recently used.
    mutating func upsert(_ digest: KeyDigest, fileSize: Int, logicalSize: Int, expiry: UInt32) {
        remove(digest)
        let node = Node(digest: digest, fileSize: fileSize, logicalSize: logicalSize, expiry: expiry)
        let index: Int32
        if let free = freeList.popLast() {
            index = free
            nodes[Int(index)] = node
        } else {
            index = Int32(nodes.count)
            nodes.append(node)
        }
        map[digest] = index
        pushFront(index)
        fileBytes += fileSize
        logicalBytes += logicalSize
    }

    /// Inserts an entry as the least recently used (for loading in order from most to least recent).
    /// - Parameter scannedModified: for an entry found by a start-up scan, its file's modification time
    ///   (see ``orderScannedByModification()``); 0 otherwise.
    mutating func appendOldest(
        _ digest: KeyDigest,
        fileSize: Int,
        logicalSize: Int,
        expiry: UInt32,
        scannedModified: UInt32 = 0
    ) {
        upsert(digest, fileSize: fileSize, logicalSize: logicalSize, expiry: expiry)
        let index = map[digest]!
        nodes[Int(index)].scannedModified = scannedModified
        unlink(index)
        pushBack(index)
    }

    /// Marks an entry most recently used.
    mutating func touch(_ digest: KeyDigest) {
        guard let index = map[digest] else { return }
        nodes[Int(index)].scannedModified = 0
        guard index != head else { return }
        unlink(index)
        pushFront(index)
    }

    /// A scanned entry not used since the scan found it, as ``scannedEntries()`` lists them.
    struct ScannedEntry {
        var slot: Int32
        var digest: KeyDigest
        var modified: UInt32
    }

    /// Entries placed by a start-up scan and not used since. A scan finds files in directory order, which
    /// says nothing about recency; their modification times (write times) say more.
    /// - Complexity: O(n).
    func scannedEntries() -> [ScannedEntry] {
        var result: [ScannedEntry] = []
        var index = head
        while index >= 0 {
            let node = nodes[Int(index)]
            if node.scannedModified != 0 {
                result.append(ScannedEntry(slot: index, digest: node.digest, modified: node.scannedModified))
            }
            index = node.next
        }
        return result
    }

    /// Moves `entries` (from ``scannedEntries()``, sorted from newest to oldest) to the least recently used
    /// end in that order. Entries used, replaced or removed since they were listed stay where they are.
    /// - Complexity: O(k) for k entries.
    mutating func moveToOldestEnd(_ entries: [ScannedEntry]) {
        for entry in entries {
            let node = nodes[Int(entry.slot)]
            guard map[entry.digest] == entry.slot, node.scannedModified == entry.modified else { continue }
            unlink(entry.slot)
            pushBack(entry.slot)
        }
    }

    @discardableResult
    mutating func remove(_ digest: KeyDigest) -> Node? {
        guard let index = map.removeValue(forKey: digest) else { return nil }
        unlink(index)
        let node = nodes[Int(index)]
        freeList.append(index)
        fileBytes -= node.fileSize
        logicalBytes -= node.logicalSize
        return node
    }

    /// Digests of expired entries among the next `budget` slots, continuing where the last call stopped and
    /// wrapping around, so that repeated calls cover the whole index a little at a time.
    /// - Parameters:
    ///   - now: the current time.
    ///   - budget: slots to examine.
    /// - Returns: the expired entries found; they are still indexed.
    /// - Complexity: O(budget).
    mutating func expiredDigests(now: UInt32, budget: Int) -> [KeyDigest] {
        var result: [KeyDigest] = []
        for _ in 0..<min(max(0, budget), nodes.count) {
            if sweepCursor >= nodes.count { sweepCursor = 0 }
            let node = nodes[sweepCursor]
            // A free slot keeps its old contents; only a mapped slot is an entry.
            if CachetClock.isExpired(node.expiry, now: now) && map[node.digest] == Int32(sweepCursor) {
                result.append(node.digest)
            }
            sweepCursor += 1
        }
        return result
    }

    /// The least recently used entry.
    var oldest: Node? { tail >= 0 ? nodes[Int(tail)] : nil }

    mutating func removeAll() {
        nodes = []
        freeList = []
        map = [:]
        head = -1
        tail = -1
        sweepCursor = 0
        fileBytes = 0
        logicalBytes = 0
    }

    /// Entries from most to least recently used.
    func inRecencyOrder() -> [Node] {
        var result: [Node] = []
        result.reserveCapacity(count)
        var index = head
        while index >= 0 {
            result.append(nodes[Int(index)])
            index = nodes[Int(index)].next
        }
        return result
    }

    /// Checks every structural invariant; traps with a message on the first violation.
    /// - Complexity: O(n).
    func checkInvariants() {
        var seen = 0
        var fileBytes = 0
        var logicalBytes = 0
        var previous: Int32 = -1
        var index = head
        while index >= 0 {
            let node = nodes[Int(index)]
            precondition(node.prev == previous, "node \(index): prev \(node.prev), expected \(previous)")
            precondition(map[node.digest] == index, "node \(index) is linked but not mapped")
            seen += 1
            precondition(seen <= map.count, "the list is longer than the map (a cycle?)")
            fileBytes += node.fileSize
            logicalBytes += node.logicalSize
            previous = index
            index = node.next
        }
        precondition(previous == tail, "tail \(tail), last linked node \(previous)")
        precondition(seen == map.count, "\(seen) linked, \(map.count) mapped")
        precondition(seen + freeList.count == nodes.count, "slots leak: \(seen) + \(freeList.count) free")
        precondition(fileBytes == self.fileBytes, "file bytes \(self.fileBytes), nodes say \(fileBytes)")
        precondition(logicalBytes == self.logicalBytes, "logical bytes \(self.logicalBytes), nodes say \(logicalBytes)")
    }

    private mutating func unlink(_ index: Int32) {
        let node = nodes[Int(index)]
        if node.prev >= 0 { nodes[Int(node.prev)].next = node.next } else { head = node.next }
        if node.next >= 0 { nodes[Int(node.next)].prev = node.prev } else { tail = node.prev }
        nodes[Int(index)].prev = -1
        nodes[Int(index)].next = -1
    }

    private mutating func pushBack(_ index: Int32) {
        nodes[Int(index)].prev = tail
        nodes[Int(index)].next = -1
        if tail >= 0 { nodes[Int(tail)].next = index } else { head = index }
        tail = index
    }

    private mutating func pushFront(_ index: Int32) {
        nodes[Int(index)].prev = -1
        nodes[Int(index)].next = head
        if head >= 0 { nodes[Int(head)].prev = index } else { tail = index }
        head = index
    }
}
