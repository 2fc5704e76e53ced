import CachetIO
import CachetStore
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Adopting connections (registered in the epoll set, or rejected with a reply and a graceful close)
/// and ending them (gracefully, or at once). Everything here runs on `queue`.
extension NodeIOQueue {
    /// Adopts an accepted socket. Called on `queue`.
    func register(fd: Int32) {
        _ = adopt(fd: fd, counted: true)
    }

    /// Adopts a socket accepted on the TLS port: its reads and writes go through a session of `context`,
    /// whose handshake the first read does. One whose handshake has not finished `handshakeDeadline`
    /// seconds later is closed, with a log line. Called on `queue`.
    func register(fd: Int32, tls context: CachetTLSContext, handshakeDeadline: Double) {
        guard let connection = adopt(fd: fd, counted: true, tls: context) else { return }
        _ = loop.schedule(after: .milliseconds(Int(handshakeDeadline * 1000))) { [weak self, weak connection] in
            guard let self, let connection, !connection.isClosed, connection.tls?.isEstablished == false else {
                return
            }
            logger.notice(
                "TLS handshake did not finish in time: connection closed",
                metadata: ["connection.fd": "\(connection.fd)", "tls.handshake_timeout": "\(handshakeDeadline)"]
            )
            close(connection)
        }
    }

    /// Answers a connection over `--max-connections` with `reply` and closes it gracefully (a client that
    /// sent requests at once would otherwise get a reset, which may discard the reply). It is not counted
    /// as open. Past 1,000 graceful closes in progress on this loop it is closed at once instead, so that
    /// a flood of connections cannot hold descriptors. Called on `queue`.
    func reject(fd: Int32, reply: [UInt8]) {
        guard upkeep.closingCount < 1_000, let connection = adopt(fd: fd, counted: false) else {
            _ = reply.withUnsafeBytes { CachetSocket.send(fd, $0) }
            CachetSocket.close(fd)
            return
        }
        reply.withUnsafeBytes { connection.output.append($0) }
        beginClosing(connection)
        settle(connection, now: CachetClock.now())
    }

    private func adopt(fd: Int32, counted: Bool, tls: CachetTLSContext? = nil) -> Connection? {
        let connection = Connection(owner: self, memory: memory, counted: counted)
        if let tls { connection.useTLS(tls) }
        if processor.authorizer != nil {
            // A node with users: AUTH first; failures are counted against the client's address.
            let address = CachetSocketAddress.remote(of: fd)?.ipAddress ?? "unknown"
            connection.access = ConnectionAccess(state: .anonymous, address: address)
        }
        connectionCount += 1
        // Registered for the events its first phase needs; a socket epoll refuses is closed at once
        // (`connectionClosed` does the bookkeeping).
        loop.register(connection, fd: fd, isNonBlocking: true)
        guard !connection.isClosed else {
            logger.warning("could not watch a new connection", metadata: ["connection.fd": "\(fd)"])
            return nil
        }
        return connection
    }

    /// Starts the graceful close: nothing more is answered; once what is queued has been sent, the write
    /// side is shut down; input is read and thrown away until the peer closes, `discardLimit` bytes, or
    /// `deadline` (by default `closeLinger` from now).
    func beginClosing(_ connection: Connection, deadline: DispatchTime? = nil) {
        switch connection.phase {
        case .closing, .closed: return
        default: break
        }
        let limit = DispatchTime.now() + closeLinger
        let deadline = deadline.map { min($0, limit) } ?? limit
        connection.input.moveReadIndex(to: connection.input.writeIndex)
        connection.phase = .closing(Connection.Closing(deadline: deadline.uptimeNanoseconds))
        upkeep.closingStarted()
        _ = send(connection)
    }

    /// Closes a connection at once: its socket, its registration (``connectionClosed(_:)`` does the rest).
    func close(_ connection: Connection) {
        guard !connection.isClosed else { return }
        connection.close()
    }

    /// A connection's channel has closed (by ``close(_:)``, a failed registration or the loop stopping): its
    /// budget, its counts. Called once per connection.
    func connectionClosed(_ connection: Connection) {
        if case .closing = connection.phase { upkeep.closingEnded() }
        connection.phase = .closed
        connectionCount -= 1
        // The buffers go with the connection (the last reference is the loop's, or a disk completion's).
        memory.charge(-connection.charged)
        connection.charged = 0
        // Forwards still in flight find their pipeline gone and write nothing.
        connection.dropForwards()
        if let stream = connection.watch {
            processor.commands.watches.unregister(stream)
            connection.watch = nil
        }
        if connection.countedAsWaiting {
            connection.countedAsWaiting = false
            upkeep.waitingChanged(false)
        }
        if connection.counted { onClose() }
    }
}
