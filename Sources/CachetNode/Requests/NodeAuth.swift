import CachetAuth
import CachetLocking
import Dispatch

/// The node's users (`--auth-file`, `docs/security.md`): the table read from the file (again on SIGHUP)
/// and the limit on failed attempts per client address, shared by every loop. Thread-safe: each behind
/// its own lock, taken only by AUTH requests.
final class NodeAuth: Sendable {
    /// The auth file.
    let path: String
    private let table: CachetLock<CachetAuthTable>
    private let limiter = CachetLock(CachetAuthFailureLimiter())

    /// Reads the auth file.
    /// - Parameter path: the file.
    /// - Throws: ``CachetNodeError`` `invalidConfiguration` naming the file and the user at fault.
    init(path: String) throws(CachetNodeError) {
        self.path = path
        do throws(CachetAuthError) {
            table = CachetLock(try CachetAuthTable(contentsOfFile: path))
        } catch {
            throw CachetNodeError(code: .invalidConfiguration, message: error.message)
        }
    }

    /// Reads the file again: connections authenticated before keep their user; AUTH from now on uses the
    /// new table. A file that cannot be read leaves the previous table in force.
    /// - Returns: the users' count, or why the file was refused.
    func reload() -> Result<Int, CachetAuthError> {
        do throws(CachetAuthError) {
            let fresh = try CachetAuthTable(contentsOfFile: path)
            table.withLock { $0 = fresh }
            return .success(fresh.userNames.count)
        } catch {
            return .failure(error)
        }
    }

    /// What an AUTH request comes to.
    enum Outcome {
        /// The user and secret match.
        case authenticated(CachetPrincipal)
        /// They do not (an unknown user or a wrong secret: the reply does not say which).
        case refused
        /// The address failed too often lately: not checked.
        case blocked
    }

    /// Checks `user` and `secret` for a client at `address`, counting a failure against the address.
    func authenticate(user: String, secret: [UInt8], address: String) -> Outcome {
        let now = DispatchTime.now().uptimeNanoseconds / 1_000_000_000
        guard limiter.withLock({ $0.allows(address, now: now) }) else { return .blocked }
        let table = table.withLock { $0 }
        if let principal = table.authenticate(user: user, secret: secret) { return .authenticated(principal) }
        limiter.withLock { $0.recordFailure(address, now: now) }
        return .refused
    }
}
