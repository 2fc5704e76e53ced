import CachetCluster
import CachetWire

/// A request on its way to the member that owns its key: the whole frame as received, with the
/// `forwarded` flag set (the request id is replaced by the peer connection's own), and what the client's
/// reply needs back. A class, so that ``PendingOperation`` (and the result every batch of requests
/// returns) stays as small as before forwarding: a larger payload cost measurably more per request in
/// copies and destroys of that result (BENCHMARKS.md, "Figures behind choices in the code").
final class ForwardRequest: Sendable {
    let frame: [UInt8]
    let opcode: CachetOpcode
    let id: UInt32
    let owner: CachetClusterMember
    /// The frame is not the client's request but an invalidation (a DEL with `forwarded` and
    /// `invalidation`) of its key, sent to confirm a write (`opcode`, PUT or DEL) that a peer forwarded to a
    /// node that routes the key to `owner`: an OK or NOT_FOUND from `owner` acknowledges the write
    /// (`Protocol/CLUSTER.md`, "Forwarding").
    let confirmation: Bool
    /// For a ``confirmation``: the write it confirms, as the peer sent it. Served here if `owner` refuses the
    /// connection (its port is closed, so it serves no copy; this node now counts it down).
    let original: [UInt8]
    /// The request came from a peer and this forward is its second hop (a confirmation, or a request a
    /// holding member passes on): it gets half the forward deadline, so that the peer hears back in time.
    let secondHop: Bool
    /// A warm-up GET to the key's previous owner (``NodeWarmUp``): its OK reply carries the TTL left before
    /// the value, and the client is answered a miss rather than UNAVAILABLE when it fails.
    let warmUp: Bool
    /// For a ``confirmation`` this node sends as the key's owner while it holds (with `fromOwner`): once
    /// `owner`, the stand-in, has dropped its copy, ``original`` is applied here, and its reply is this
    /// node's (`Protocol/CLUSTER.md`, "The owner's hold").
    let appliesHere: Bool

    /// A GET with the `ttl` flag: its reply carries the TTL left, so it never shares a plain GET's reply.
    var asksTTL: Bool { frame.count >= 12 && frame[7] & UInt8(CachetRequestFlags.ttl.rawValue) != 0 }

    /// A GET with the `range` flag: its reply is a part of the value, so it never shares another GET's reply.
    var asksRange: Bool { frame.count >= 12 && frame[6] & UInt8(CachetRequestFlags.range.rawValue >> 8) != 0 }

    init(
        frame: [UInt8],
        opcode: CachetOpcode,
        id: UInt32,
        owner: CachetClusterMember,
        confirmation: Bool = false,
        original: [UInt8] = [],
        secondHop: Bool = false,
        warmUp: Bool = false,
        appliesHere: Bool = false
    ) {
        self.frame = frame
        self.opcode = opcode
        self.id = id
        self.owner = owner
        self.confirmation = confirmation
        self.original = original
        self.secondHop = secondHop
        self.warmUp = warmUp
        self.appliesHere = appliesHere
    }

    /// The opcode of ``frame``: the client's, or DEL for a ``confirmation``.
    var frameOpcode: CachetOpcode { confirmation ? .delete : opcode }

    // MARK: - The forwards the routing decision makes

    /// The whole request `frame` as received, its length prefix included: what a forward sends on.
    static func requestBytes(_ frame: CachetFrame, in buffer: UnsafeRawBufferPointer) -> [UInt8] {
        let start = frame.body.lowerBound - CachetProtocol.headerSize - CachetProtocol.lengthPrefixSize
        return Array(buffer[start..<frame.end])
    }

    /// A request passed on to `target` (the key's owner, or its stand-in) as received, with `forwarded` set,
    /// and `lastHop` when `target` must serve it itself; a second hop when it came forwarded. The `frames`
    /// flag is cleared: a peer's reply is one frame (a value longer than one is answered TOO_LARGE).
    static func passingOn(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        to target: CachetClusterMember,
        lastHop: Bool
    ) -> ForwardRequest {
        let forwarded =
            CachetRequestFlags.forwarded.rawValue | (lastHop ? CachetRequestFlags.lastHop.rawValue : 0)
        var request = requestBytes(frame, in: buffer)
        request.withUnsafeMutableBytes {
            let flags = (frame.header.flags | forwarded) & ~CachetRequestFlags.frames.rawValue
            $0.storeBytes(of: flags.bigEndian, toByteOffset: 6, as: UInt16.self)
        }
        return ForwardRequest(
            frame: request,
            opcode: frame.header.opcode,
            id: frame.header.id,
            owner: target,
            secondHop: frame.header.flags & CachetRequestFlags.forwarded.rawValue != 0
        )
    }

    /// The confirmation of a write (`opcode`, PUT or DEL, of the client's request `id`) of `key`: a DEL with
    /// `forwarded`, `invalidation`, `lastHop` and `flags` (`fromOwner`, `relayed`) for `target`
    /// (`Protocol/CLUSTER.md`, "Forwarding" and "The owner's hold").
    static func confirmation(
        of key: UnsafeRawBufferPointer,
        flags: CachetRequestFlags = [],
        opcode: CachetOpcode,
        id: UInt32,
        to target: CachetClusterMember,
        original: [UInt8] = [],
        secondHop: Bool = true,
        appliesHere: Bool = false
    ) -> ForwardRequest {
        ForwardRequest(
            frame: CachetCommand.delete(key: Array(key)).encoded(
                id: 0,
                flags: flags.union([.forwarded, .invalidation, .lastHop])
            ),
            opcode: opcode,
            id: id,
            owner: target,
            confirmation: true,
            original: original,
            secondHop: secondHop,
            appliesHere: appliesHere
        )
    }

    /// The fan-out of a CLEAR or STATS with the `cluster` flag (and without `forwarded`, which cancels it):
    /// the same request, `forwarded` set and `cluster` clear, for every member, this node included; nil for
    /// any other request.
    @inline(never)
    static func fanOut(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        clearPrefixes: [[UInt8]]? = nil
    ) -> PendingOperation? {
        let flags = CachetRequestFlags(rawValue: frame.header.flags)
        guard flags.contains(.cluster), !flags.contains(.forwarded) else { return nil }
        // A CLEAR whose user's prefixes narrow it carries them to every member in its body.
        var request =
            clearPrefixes.map { CachetCommand.clearPrefixes($0).encoded(id: frame.header.id, flags: flags) }
            ?? requestBytes(frame, in: buffer)
        let word = (frame.header.flags | CachetRequestFlags.forwarded.rawValue) & ~CachetRequestFlags.cluster.rawValue
        request.withUnsafeMutableBytes { $0.storeBytes(of: word.bigEndian, toByteOffset: 6, as: UInt16.self) }
        let nobody = CachetClusterMember(id: "", host: "", port: 0)
        return .fanOut(ForwardRequest(frame: request, opcode: frame.header.opcode, id: frame.header.id, owner: nobody))
    }
}

extension ForwardRequest {
    /// The key of a forwarded GET, PUT or DEL; nil for anything else (or a frame that does not parse,
    /// which the processor would not have forwarded).
    var key: [UInt8]? {
        frame.withUnsafeBytes { buffer -> [UInt8]? in
            guard let frame = try? CachetFrameDecoder.decodeFrame(in: buffer, maximumPayloadLength: .max) else {
                return nil
            }
            let key: Range<Int>
            switch frameOpcode {
            case .get, .delete:
                guard let range = try? CachetBodyDecoder.decodeKey(in: buffer, body: frame.body) else { return nil }
                key = range
            case .put:
                let leased = frame.header.flags & CachetRequestFlags.lease.rawValue != 0
                guard let put = try? CachetBodyDecoder.decodePut(in: buffer, body: frame.body, leased: leased) else {
                    return nil
                }
                key = put.put.key
            default:
                return nil
            }
            return Array(buffer[key])
        }
    }
}
