/// The bits of a request header's `flags` word. See `Protocol/PROTOCOL.md`, "Request flags".
///
/// A version 1 client that knows nothing of clusters sends 0 and sees no change. Bits this type does not
/// define are **ignored** by a node (``CachetFrameHeader/requestFlags`` masks them off), as PROTOCOL.md
/// has promised since version 1, so that a later revision can give a bit a meaning older nodes may
/// safely ignore.
public struct CachetRequestFlags: OptionSet, Hashable, Sendable, CustomStringConvertible {
    /// The flags word as sent.
    public var rawValue: UInt16

    /// Creates flags from a flags word.
    /// - Parameter rawValue: the 16-bit word.
    @inlinable
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// `0x0001`: a node-to-node request. A node never forwards it again: one that receives it for a key it
    /// does not own serves it itself and counts a routing disagreement; on CLEAR and STATS it also turns
    /// off ``cluster``, so a fan-out never fans out again.
    @inlinable public static var forwarded: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0001) }

    /// `0x0002`: on CLEAR and STATS, ask every member of the cluster and answer with the aggregate and each
    /// member's result. Ignored on the other opcodes and when ``forwarded`` is set.
    @inlinable public static var cluster: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0002) }

    /// `0x0004`: with ``forwarded`` on DEL and CLEAR, a stand-in's invalidation for the key's owner
    /// (`Protocol/CLUSTER.md`, "Failover without stale reads"): served even while the owner holds, when it
    /// refuses other writes of its keys from peers. Ignored otherwise.
    @inlinable public static var invalidation: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0004) }

    /// `0x0008`: with ``forwarded``, a request a node sends on after it received it itself (a member that
    /// holds after an absence passes a write of its key to the stand-in, or a request to the next stand-in):
    /// the receiver serves it itself, and neither sends it on nor asks another member to confirm it, so a
    /// request crosses at most two members and no two members wait on each other (`Protocol/CLUSTER.md`,
    /// "Forwarding"). Ignored otherwise.
    @inlinable public static var lastHop: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0008) }

    /// `0x0010`: with ``forwarded`` on PING, a member telling a peer that it is leaving the cluster (it was
    /// sent SIGTERM): the body is the sender's member id, and the receiver marks it down at once, sending
    /// its keys to their stand-ins (`Protocol/CLUSTER.md`, "A member that stops"). Ignored otherwise.
    @inlinable public static var leaving: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0010) }

    /// `0x0020`: with ``forwarded`` on GET, a member that owns the key since a membership change asks its
    /// previous owner for it (`Protocol/CLUSTER.md`, "Warm-up after a membership change"): the receiver
    /// answers from its memory whatever its ring says, and an OK reply's body is the TTL left (4 bytes,
    /// seconds, 0 for none) followed by the value. Ignored otherwise.
    @inlinable public static var warmUp: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0020) }

    /// `0x0040`: on GET and PUT, read-through with leases (`Protocol/PROTOCOL.md`, "Leases"). A GET that
    /// misses is answered with a lease on the key (a token) when nobody holds one, else with how long to
    /// wait before asking again; a PUT carries the token before its usual body, and stores only while its
    /// lease stands (no DEL, PUT or CLEAR of the key since it was granted, not expired), else answers
    /// NOT_STORED. Clients may send it. Ignored on the other opcodes.
    @inlinable public static var lease: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0040) }

    /// `0x0080`: on GET, the reply's body is the TTL the entry has left (4 bytes, big-endian seconds, 0 for
    /// none) followed by the value, so that a client can keep or report an entry's expiry without storing
    /// it in the value (`Protocol/PROTOCOL.md`, "GET with the TTL left"). Clients may send it; a node
    /// before this revision ignores it and answers the bare value. Ignored on the other opcodes.
    @inlinable public static var ttl: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0080) }

    /// `0x0100`: on a confirmation (a DEL with ``forwarded``, ``invalidation`` and ``lastHop``), sent by the
    /// key's owner, which takes the write it confirms itself while it holds (`Protocol/CLUSTER.md`, "The
    /// owner's hold"): the receiver drops its copy of the key and forgets it for the owner, and answers OK
    /// when it routes the key to the owner or stands in for it; it sends it on (``relayed``) when it routes
    /// the key to another member, and refuses while it cannot tell where the key is served. A node before
    /// this revision takes it for a plain confirmation. Ignored otherwise.
    @inlinable public static var fromOwner: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0100) }

    /// `0x0200`: with ``fromOwner``, the confirmation was sent on by the member the owner asked, to the member
    /// that one routes the key to (it holds and defers to the next member, or sees another stand-in): the
    /// receiver drops its copy as for ``fromOwner``, and refuses rather than sending it on again when it
    /// routes the key elsewhere in turn. Ignored otherwise.
    @inlinable public static var relayed: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0200) }

    /// `0x0400`: with ``forwarded`` on PING, a member that holds its own keys after an absence asks a peer
    /// whether its hold may end (`Protocol/CLUSTER.md`, "The owner's hold"): the body names the member and
    /// its membership (``CachetHoldCheck``), and the OK reply's one byte says whether the peer routes the
    /// member's keys to it and owes it nothing. Ignored otherwise, and by a cluster of one.
    @inlinable public static var holdCheck: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0400) }

    /// `0x0800`: with ``forwarded`` on PING, a member that marked a peer down after its requests timed out
    /// asks another peer whether it still routes to that peer (`Protocol/CLUSTER.md`, "Health"): the body is
    /// the member id asked about, and the OK reply's one byte is a ``CachetViewCheck/Answer``. Ignored
    /// otherwise, and by a cluster of one.
    @inlinable public static var viewCheck: CachetRequestFlags { CachetRequestFlags(rawValue: 0x0800) }

    /// `0x1000`: on GET, a range of the value (`Protocol/PROTOCOL.md`, "GET of a range"): the body carries an
    /// offset and a length after the key (``CachetValueRange``), and the OK reply's body is the value's whole
    /// length (u64) and tag (u64, ``CachetValueRange/decodeReply(_:)``) followed by the bytes of the range. A node before this revision answers such a body
    /// BAD_REQUEST (bytes after a GET's key), never the whole value. Clients may send it. Not with `lease`
    /// or `ttl`. Ignored on the other opcodes.
    @inlinable public static var range: CachetRequestFlags { CachetRequestFlags(rawValue: 0x1000) }

    /// `0x2000`: on PUT, one part of a value sent in parts (`Protocol/PROTOCOL.md`, "PUT in parts"): the
    /// value field starts with the upload's id, the value's whole length and the part's offset
    /// (``CachetUploadPart``), then the part's bytes; the value is stored, and seen by readers, once its last
    /// part has arrived. Clients may send it. Not with `lease`. Ignored on the other opcodes. A node before
    /// this revision would store the part as the whole value: send it only to nodes of this revision or later.
    @inlinable public static var part: CachetRequestFlags { CachetRequestFlags(rawValue: 0x2000) }

    /// `0x4000`: on GET, the client takes a value longer than one frame holds as several reply frames
    /// (`Protocol/PROTOCOL.md`, "GET of a value longer than a frame"): every frame but the last carries the
    /// status ``CachetStatus/continues`` and the next bytes of the value, the last one OK and the value's last
    /// bytes. A value that fits one frame is answered as without the flag. Clients may send it; a node before
    /// this revision ignores it (and answers such a value TOO_LARGE). Ignored on the other opcodes, with
    /// `range`, and on a request between nodes.
    @inlinable public static var frames: CachetRequestFlags { CachetRequestFlags(rawValue: 0x4000) }

    /// `0x8000`: on GET and PUT, an item with memcached's fields (`Protocol/PROTOCOL.md`, "Items: flags, CAS
    /// and conditional writes"): a GET's OK reply is the item's flags (u32) and CAS unique (u64) before the
    /// value; a PUT's value field starts with a mode, flags and a CAS unique (``CachetItemWrite``) and is a
    /// storage, arithmetic or touch command done at once on the key's owner. Clients may send it. A node
    /// before this revision ignores it: send it only to nodes of this revision or later (STATS `version`
    /// 0.4.0 and after).
    @inlinable public static var item: CachetRequestFlags { CachetRequestFlags(rawValue: 0x8000) }

    /// Every bit defined in this revision.
    @inlinable public static var defined: CachetRequestFlags { CachetRequestFlags(rawValue: 0xffff) }

    /// The bits set here that this revision does not define (and a node ignores).
    @inlinable
    public var undefinedBits: UInt16 { rawValue & ~CachetRequestFlags.defined.rawValue }

    /// Whether a request of `opcode` with these flags is a cluster-wide fan-out: ``cluster`` set,
    /// ``forwarded`` clear, and the opcode CLEAR or STATS.
    /// - Parameter opcode: the request's opcode.
    /// - Returns: `true` when the node receiving it must ask every member.
    @inlinable
    public func fansOut(for opcode: CachetOpcode) -> Bool {
        contains(.cluster) && !contains(.forwarded) && (opcode == .clear || opcode == .stats)
    }

    /// The names of the defined bits set, joined by `|` (`forwarded|cluster`), then any undefined bits in
    /// hex; `none` for 0.
    public var description: String {
        var names: [String] = []
        if contains(.forwarded) { names.append("forwarded") }
        if contains(.cluster) { names.append("cluster") }
        if contains(.invalidation) { names.append("invalidation") }
        if contains(.lastHop) { names.append("lastHop") }
        if contains(.leaving) { names.append("leaving") }
        if contains(.warmUp) { names.append("warmUp") }
        if contains(.lease) { names.append("lease") }
        if contains(.ttl) { names.append("ttl") }
        if contains(.fromOwner) { names.append("fromOwner") }
        if contains(.relayed) { names.append("relayed") }
        if contains(.holdCheck) { names.append("holdCheck") }
        if contains(.viewCheck) { names.append("viewCheck") }
        if contains(.range) { names.append("range") }
        if contains(.part) { names.append("part") }
        if contains(.frames) { names.append("frames") }
        if contains(.item) { names.append("item") }
        if undefinedBits != 0 { names.append("0x" + String(undefinedBits, radix: 16)) }
        return names.isEmpty ? "none" : names.joined(separator: "|")
    }
}

extension CachetFrameHeader {
    /// The request flags this revision defines, with undefined bits masked off (they are ignored).
    @inlinable
    public var requestFlags: CachetRequestFlags {
        CachetRequestFlags(rawValue: word & CachetRequestFlags.defined.rawValue)
    }
}
