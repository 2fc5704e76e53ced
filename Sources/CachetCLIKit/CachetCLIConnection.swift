public import CachetIO
public import CachetWire

/// A blocking connection to one node, with a timeout on connect and on each reply, over CachetIO's
/// ``CachetBlockingConnection``.
///
/// Used from one thread; the CLI sends one request and waits for its reply.
public final class CachetCLIConnection {
    /// The node's address, as given.
    public let host: String
    /// The node's port.
    public let port: Int
    private let address: CachetAddress
    private var connection: CachetBlockingConnection?
    private let timeout: Double
    private let maximumReplyLength: Int
    /// The TLS client context (`--tls`); nil for plain TCP.
    private let tls: CachetTLSContext?
    /// The user and secret sent as AUTH on each new connection (`--user`); nil for none.
    private let credentials: (user: String, secret: [UInt8])?
    private var nextID: UInt32 = 1

    /// Checks a host and port given on the command line, without connecting.
    /// - Parameters:
    ///   - host: an IPv4 or IPv6 address, or a host name.
    ///   - port: the TCP port.
    /// - Throws: ``CachetCLIError`` `usage` saying what is wrong.
    public static func validate(host: String, port: Int) throws(CachetCLIError) {
        do {
            try CachetAddress(host: host, port: port).validate()
        } catch {
            throw CachetCLIError(code: .usage, message: error.message)
        }
    }

    /// Connects to `host:port`.
    /// - Parameters:
    ///   - host: an IPv4 or IPv6 address (without brackets), or a host name.
    ///   - port: the TCP port.
    ///   - timeout: seconds allowed for the connection and for each reply.
    ///   - maximumReplyLength: the largest reply payload accepted; a peer announcing a longer one (or one
    ///     shorter than the header) is reported at once.
    ///   - tls: a TLS client context, or nil for plain TCP.
    ///   - credentials: a user and secret to AUTH with on each new connection, or nil.
    /// - Throws: ``CachetCLIError`` `usage`, `connection` or `timeout` naming the address (a failed TLS
    ///   handshake is a `connection` error with OpenSSL's reason).
    public init(
        host: String,
        port: Int,
        timeout: Double,
        maximumReplyLength: Int = CachetProtocol.defaultMaximumPayloadLength,
        tls: CachetTLSContext? = nil,
        credentials: (user: String, secret: [UInt8])? = nil
    ) throws(CachetCLIError) {
        self.host = host
        self.port = port
        self.timeout = timeout
        self.maximumReplyLength = maximumReplyLength
        self.tls = tls
        self.credentials = credentials
        address = CachetAddress(host: host, port: port)
        try Self.validate(host: host, port: port)
        try open()
    }

    deinit { close() }

    private func open() throws(CachetCLIError) {
        do {
            if let tls {
                connection = try CachetBlockingConnection(to: address, timeout: .seconds(timeout), tls: tls)
            } else {
                connection = try CachetBlockingConnection(to: address, timeout: .seconds(timeout))
            }
        } catch {
            // A plain node port answers a TLS ClientHello with a frame, which OpenSSL reports as a record of a
            // wrong version.
            let plainPort =
                tls != nil && error.code == .tlsHandshakeFailed && error.message.contains("wrong version number")
            throw Self.translate(
                error,
                hint: plainPort
                    ? " (\(address) does not speak TLS: drop --tls, or give the node's --tls-port)" : ""
            )
        }
        guard let credentials else { return }
        let (reply, _, _) = try send(.auth(user: Array(credentials.user.utf8), secret: credentials.secret))
        guard reply.status == .ok else {
            close()
            throw CachetCLIError(
                code: .connection,
                message: "AUTH as \(credentials.user) refused by \(address): \(reply.status) "
                    + String(decoding: reply.body, as: UTF8.self)
            )
        }
    }

    private static func translate(_ error: CachetIOError, hint: String = "") -> CachetCLIError {
        let code: CachetCLIError.Code
        switch error.code {
        case .timedOut: code = .timeout
        case .invalidAddress: code = .usage
        default: code = .connection
        }
        return CachetCLIError(code: code, message: error.message + hint)
    }

    /// Closes the connection; the next request reconnects.
    public func close() {
        connection?.close()
        connection = nil
    }

    /// Sends `command` and waits for its reply, reconnecting first if the node had closed the connection.
    /// - Parameters:
    ///   - command: the request.
    ///   - flags: the request flags (`cluster` for `--cluster stats` and `--cluster clear`).
    /// - Returns: the reply, and the exact bytes sent and received (for tracing).
    /// - Throws: ``CachetCLIError`` `connection`, `timeout` or `protocolViolation`.
    public func send(_ command: CachetCommand, flags: CachetRequestFlags = []) throws(CachetCLIError) -> (
        response: CachetResponse, sent: [UInt8], received: [UInt8]
    ) {
        if connection == nil { try open() }
        let id = nextID
        nextID &+= 1
        let request = command.encoded(id: id, flags: flags)
        do throws(CachetCLIError) {
            let connection = connection!
            do {
                try connection.send(request, until: CachetDeadline(after: .seconds(timeout)))
            } catch {
                throw Self.translate(error)
            }
            let (response, raw) = try readResponse(from: connection)
            guard response.id == id else {
                throw CachetCLIError(
                    code: .protocolViolation,
                    message: "reply id \(response.id) does not match request id \(id)"
                )
            }
            return (response, request, raw)
        } catch {
            close()
            throw error
        }
    }

    /// Waits for the next frame the node sends on its own (an EVENT of a WATCH), for at most `seconds`.
    /// - Returns: the frame, or nil when none came in time.
    /// - Throws: ``CachetCLIError`` `connection` when the node closed the connection.
    public func nextFrame(within seconds: Double) throws(CachetCLIError) -> CachetResponse? {
        guard let connection else { throw CachetCLIError(code: .connection, message: "not connected to \(address)") }
        do throws(CachetCLIError) {
            return try readResponse(from: connection, within: seconds).0
        } catch  where error.code == .timeout {
            return nil
        }
    }

    private func readResponse(from connection: CachetBlockingConnection, within seconds: Double? = nil)
        throws(CachetCLIError) -> (
            CachetResponse, [UInt8]
        )
    {
        let deadline = CachetDeadline(after: .seconds(seconds ?? timeout))
        while true {
            let region = connection.input.readableRegion
            let frame: CachetFrame?
            do {
                frame = try CachetReplyDecoder.decodeReply(in: region, maximumPayloadLength: maximumReplyLength)
            } catch {
                throw CachetCLIError(
                    code: .protocolViolation,
                    message: "invalid reply from \(address): \(error.message)"
                )
            }
            if let frame {
                let response = CachetResponse(frame: frame, in: region)
                let raw = Array(region[0..<frame.end])
                connection.input.moveReadIndex(forwardBy: frame.end)
                return (response, raw)
            }
            let received: Int
            do {
                received = try connection.receive(until: deadline)
            } catch {
                if error.code == .timedOut {
                    throw CachetCLIError(code: .timeout, message: "no reply from \(address) within \(timeout) s")
                }
                throw Self.translate(error)
            }
            if received == 0 {
                let partial = connection.input.readableBytes
                // A node's TLS port closes a connection whose first bytes are no TLS handshake.
                let hint = tls == nil && partial == 0 ? " (if \(port) is a node's --tls-port, add --tls)" : ""
                throw CachetCLIError(
                    code: .connection,
                    message: "\(address) closed the connection"
                        + (partial > 0 ? " after \(partial) bytes of a reply" : "") + hint
                )
            }
        }
    }
}
