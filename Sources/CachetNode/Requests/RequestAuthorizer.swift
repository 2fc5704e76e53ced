import CachetAuth
import CachetIO
import CachetWire

/// Users on the request path (`Protocol/PROTOCOL.md`, "AUTH"; `docs/security.md`): on a node with an auth
/// file, a connection sends AUTH first, and each request after is checked against its user's role and key
/// prefixes. Not made on a node without one.
///
/// One per loop, used on the loop's queue; the users' table it checks is shared (``NodeAuth``).
struct RequestAuthorizer {
    /// The node's users.
    let auth: NodeAuth

    /// Answers an AUTH, or checks a request against the connection's user. Returns whether the request
    /// goes on to be served; otherwise its reply (OK for a successful AUTH, NOT_AUTHENTICATED, FORBIDDEN,
    /// or a bad request's error) is in `output`.
    func authorize(
        _ frame: CachetFrame,
        in buffer: UnsafeRawBufferPointer,
        access: inout ConnectionAccess,
        output: inout CachetByteBuffer
    ) -> Bool {
        let header = frame.header
        do {
            try CachetFrameDecoder.validateRequestHeader(header)
            if header.opcode == .auth {
                let (user, secret) = try CachetBodyDecoder.decodeAuth(in: buffer, body: frame.body)
                authenticate(
                    user: String(decoding: UnsafeRawBufferPointer(rebasing: buffer[user]), as: UTF8.self),
                    secret: Array(buffer[secret]),
                    id: header.id,
                    access: &access,
                    output: &output
                )
                return false
            }
            guard case .user(let principal) = access.state else {
                appendMessage(
                    "this node requires AUTH first (user and secret from its auth file)",
                    status: .notAuthenticated,
                    opcode: header.opcode,
                    id: header.id,
                    to: &output
                )
                return false
            }
            let key: Range<Int>?
            switch header.opcode {
            case .get where header.flags & CachetRequestFlags.range.rawValue != 0:
                key = try CachetBodyDecoder.decodeRangedKey(in: buffer, body: frame.body).key
            case .get, .delete: key = try CachetBodyDecoder.decodeKey(in: buffer, body: frame.body)
            case .put:
                let leased = header.flags & CachetRequestFlags.lease.rawValue != 0
                key = try CachetBodyDecoder.decodePut(in: buffer, body: frame.body, leased: leased).put.key
            case .watch: key = try CachetWatchRequest.prefixRange(in: buffer, body: frame.body)
            default: key = nil
            }
            // A meta get that only reads travels as an item PUT; a user who may read may send it.
            let readsOnly = key.map { RequestRouter.isItemRead(frame, key: $0, in: buffer) } ?? false
            let refusal = principal.refusal(
                opcode: readsOnly ? .get : header.opcode,
                flags: header.flags,
                key: key.map { UnsafeRawBufferPointer(rebasing: buffer[$0]) }
            )
            if let refusal {
                appendMessage(refusal, status: .forbidden, opcode: header.opcode, id: header.id, to: &output)
                return false
            }
            if header.opcode == .clear,
                case .failure(let refusal) = principal.clearScope(
                    requested: try CachetBodyDecoder.decodeClear(in: buffer, body: frame.body)
                )
            {
                appendMessage(refusal.message, status: .forbidden, opcode: .clear, id: header.id, to: &output)
                return false
            }
            return true
        } catch {
            // Served as usual: the request's own error is what it gets.
            return true
        }
    }

    private func authenticate(
        user: String,
        secret: [UInt8],
        id: UInt32,
        access: inout ConnectionAccess,
        output: inout CachetByteBuffer
    ) {
        switch auth.authenticate(user: user, secret: secret, address: access.address) {
        case .authenticated(let principal):
            access.state = .user(principal)
            access.failures = 0
            appendReply(opcode: .auth, status: .ok, id: id, to: &output)
        case .refused:
            access.state = .anonymous
            access.failures += 1
            access.closeRequested = access.failures >= ConnectionAccess.failuresBeforeClosing
            appendMessage(
                "wrong user or secret" + (access.closeRequested ? "; closing after 3 failed attempts" : ""),
                status: .notAuthenticated,
                opcode: .auth,
                id: id,
                to: &output
            )
        case .blocked:
            access.state = .anonymous
            access.closeRequested = true
            appendMessage(
                "too many failed attempts from \(access.address) lately: try again in a minute",
                status: .notAuthenticated,
                opcode: .auth,
                id: id,
                to: &output
            )
        }
    }
}
