import CachetIO
import CachetWire

/// The answers to the PINGs members send each other with a flag beside `forwarded` (`Protocol/PROTOCOL.md`,
/// "Request flags"): a member leaving the cluster (`leaving`), a returning member asking whether its hold may
/// end (`holdCheck`), and a member asking whether this node still routes to a peer it marked down on timeouts
/// (`viewCheck`). Each reads or changes ``NodeHealth``; none is forwarded.
struct PeerPings {
    let health: NodeHealth

    /// Answers `frame` when it is a PING with `forwarded` and one of the three flags, and returns true; returns
    /// false for any other PING.
    /// - Throws: ``CachetWireError`` for a check whose body is malformed (answered BAD_REQUEST by the caller).
    func answer(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        output: inout CachetByteBuffer
    ) throws(CachetWireError) -> Bool {
        let flags = frame.header.flags
        guard flags & CachetRequestFlags.forwarded.rawValue != 0 else { return false }
        let id = frame.header.id
        if flags & CachetRequestFlags.leaving.rawValue != 0 {
            // The member whose id is the body was sent SIGTERM and answers nothing more: marked down at once,
            // so that its keys go to their stand-ins without waiting for a refused connection (its probes
            // bring it back). OK, even for an id not in force (nothing is marked then).
            health.memberLeaving(String(decoding: UnsafeRawBufferPointer(rebasing: buffer[frame.body]), as: UTF8.self))
            appendReply(opcode: .ping, status: .ok, id: id, to: &output)
            return true
        }
        let answer: UInt8
        if flags & CachetRequestFlags.holdCheck.rawValue != 0 {
            answer = health.holdCheck(try CachetHoldCheck.decode(in: buffer, body: frame.body)).rawValue
        } else if flags & CachetRequestFlags.viewCheck.rawValue != 0 {
            answer = health.viewCheck(try CachetViewCheck.decode(in: buffer, body: frame.body)).rawValue
        } else {
            return false
        }
        [answer].withUnsafeBytes { appendReply(opcode: .ping, status: .ok, id: id, body: $0, to: &output) }
        return true
    }
}
